"""``accelerate launch train_gausscse.py …`` — the training command as a script, as in Hugging Face's examples.

The same command is installed as ``gausscse-train``; the code is ``gausscse.cli.train``. Tests and notebooks import
``main`` from here (``train_gausscse.main(argv)`` returns the final model folder).
"""

from gausscse.cli.train import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    run()
