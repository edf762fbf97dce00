"""The README's usage example runs as written, in a fresh process, against a saved model folder."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def usage_example() -> str:
    section = README.read_text().split("## Usage", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_usage_example_runs_as_written(make_tiny_model, minilm_tokenizer, fresh_python, tmp_path):
    code = usage_example()
    folder = re.search(r'AutoModel\.from_pretrained\("([^"]+)"', code).group(1)
    model = make_tiny_model()
    model.save_pretrained(tmp_path / folder)
    minilm_tokenizer.save_pretrained(tmp_path / folder)
    output = fresh_python(code, cwd=tmp_path)
    assert "torch.Size([4, 32])" in output
    assert output.count("tensor([") >= 4
    assert len(code.strip().splitlines()) <= 12
