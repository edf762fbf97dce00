"""``accelerate launch train_gausscse.py …`` — the training command as a script, as in Hugging Face's examples.

The same command is installed as ``gausscse-train``; the code is ``gausscse.cli.train``.
"""

import sys

from gausscse.cli.train import main

if __name__ == "__main__":
    main(sys.argv[1:])
