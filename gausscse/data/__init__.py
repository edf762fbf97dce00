"""The data layer that training and evaluation share.

* ``registry`` — the built-in NLI/STS datasets: offline files under ``--data_dir`` / ``$GAUSSCSE_DATA_DIR`` /
  ``../shared/data``, else their Hub copies (``load_split``);
* ``sources`` — training data from built-in names, your files (CSV/TSV/JSON/JSONL/Parquet, gzip) or any Hub dataset,
  in three shapes (NLI rows, triplets, pairs) → examples (``DataSpec``, ``load_training_examples``);
* ``tokenize`` — each example tokenised once, cached (``tokenize_examples``).
"""
