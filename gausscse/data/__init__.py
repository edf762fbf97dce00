"""The data layer training and evaluation share: the built-in datasets (``registry``), training data from anywhere
(``sources``) and its tokenisation (``tokenize``)."""
