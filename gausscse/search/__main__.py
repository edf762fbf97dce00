"""``python -m gausscse.search build|query …``: the search command line (``gausscse.cli.search``)."""

from gausscse.cli.search import run

run()
