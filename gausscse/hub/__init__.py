"""What a model folder says on the Hub: its model card (``model_card``: the README's text, metadata and results)."""
