"""encode's pipeline (gausscse/model/encoding_gausscse.py: padding in a thread ahead of the forward) and its forward
passes on several devices (gausscse/model/devices_gausscse.py: worker processes, here CPU processes)."""

import threading
from pathlib import Path

import pytest
import torch

from gausscse.model.devices_gausscse import EncodePool
from gausscse.model.encoding_gausscse import length_sorted_batches, pad_token_ids, padded_batches, prefetch

from ..helpers import tiny_model

WORDS = "the a man woman dog plays runs near park music old young red blue sings eats".split()


def corpus(count: int) -> list[str]:
    """``count`` distinct sentences of 1 to 40 words (every length appears, so batches pad differently)."""
    return [
        " ".join([f"s{index}", *(WORDS[(index * 7 + k) % len(WORDS)] for k in range(index % 40))])
        for index in range(count)
    ]


@pytest.fixture(scope="module")
def model(minilm_tokenizer):
    model = tiny_model(initializer_range=0.2)  # sentences apart by far more than float rounding
    model.get_tokenizer(minilm_tokenizer)
    return model


def test_two_cpu_processes_return_encodes_gaussians_in_input_order(model):
    """10,000 sentences through a pool of two CPU worker processes: encode's own Gaussians, row for row (the workers
    run the batches a single process runs; float32 rounding may differ with their thread count)."""
    sentences = corpus(10_000)
    expected = model.encode(sentences, batch_size=64)
    pool = model.start_multi_process_pool(["cpu", "cpu"])
    try:
        first = model.encode(sentences, batch_size=64, pool=pool)
        again = model.encode(sentences[::-1][:500], batch_size=16, pool=pool)  # the pool serves a second call
    finally:
        model.stop_multi_process_pool(pool)
    torch.testing.assert_close(first.mu, expected.mu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(first.logvar, expected.logvar, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(again.mu, expected.mu.flip(0)[:500], rtol=1e-5, atol=1e-6)
    assert (expected.mu[1:] - expected.mu[:-1]).abs().amax(dim=1).min() > 1e-3  # a row out of place would show
    with pytest.raises(RuntimeError, match="closed"):
        model.encode(sentences, pool=pool)


def test_a_device_list_runs_a_pool_for_the_call(model):
    sentences = corpus(300)
    several = model.encode(sentences, device=["cpu", "cpu"], batch_size=8)
    torch.testing.assert_close(several.mu, model.encode(sentences, batch_size=8).mu, rtol=1e-5, atol=1e-6)


def test_a_failing_worker_is_named_and_bad_devices_are_refused(model):
    with pytest.raises(RuntimeError, match="encode worker on meta failed"), EncodePool(model, ["meta"]) as pool:
        model.encode(corpus(10), pool=pool)  # a model on the meta device has no data to compute with
    with pytest.raises(ValueError, match="at least one device"):
        EncodePool(model, [])
    with pytest.raises(ValueError, match="torch devices"):
        EncodePool(model, ["gpu-7"])


def test_a_pool_serves_only_the_model_it_was_started_for(model, minilm_tokenizer):
    other = tiny_model(seed=1, initializer_range=0.2)
    other.get_tokenizer(minilm_tokenizer)
    with model.start_multi_process_pool(["cpu"]) as pool:
        with pytest.raises(ValueError, match=r"pool was started for another model .*start_multi_process_pool"):
            other.encode(corpus(5), pool=pool)
        model.config.search_kl_weight = 0.3  # a score weight changes no Gaussian: the pool still serves
        try:
            torch.testing.assert_close(model.encode(corpus(5), pool=pool).mu, model.encode(corpus(5)).mu)
        finally:
            model.config.search_kl_weight = None
        changed = tiny_model(initializer_range=0.2)
        changed.get_tokenizer(minilm_tokenizer)
        with torch.no_grad():
            changed.logvar_head.bias.add_(0.5)  # the same model, its weights changed in place after the start
        with EncodePool(changed, ["cpu"]) as changed_pool:
            with torch.no_grad():
                changed.logvar_head.bias.sub_(0.5)
            with pytest.raises(ValueError, match="pool was started for another model"):
                changed.encode(corpus(5), pool=changed_pool)


@pytest.mark.skipif(torch.cuda.device_count() > 7, reason="needs a machine with at most 7 CUDA devices")
def test_devices_this_machine_lacks_are_refused_before_any_worker_starts(model):
    for devices in (["cuda:7"], ["cpu", "cuda:7"]):
        with pytest.raises(ValueError, match=r"cannot encode on cuda:7: this machine has (no cuda|\d+ cuda) device"):
            model.encode(corpus(4), device=devices)


def test_workers_that_cannot_import_the_main_module_end_encode_with_one_line(tmp_path):
    """A script read from standard input: spawned workers cannot re-import it; encode says so instead of waiting."""
    from ..helpers import MINILM_PATH

    script = f"""
import torch
from transformers import AutoTokenizer
from tests.helpers import tiny_model
model = tiny_model()
model.get_tokenizer(AutoTokenizer.from_pretrained({str(MINILM_PATH)!r}))
try:
    model.encode(["a dog runs", "two men cook"], device=["cpu", "cpu"])
except RuntimeError as error:
    print("REFUSED", error)
"""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120, cwd=root, check=True
    )
    assert "REFUSED encode on several devices starts worker processes that re-import your main module" in done.stdout
    assert "'<stdin>' is no file they can read" in done.stdout


def test_padding_matches_the_tokenizers_own(minilm_tokenizer):
    sentences = ["a dog", "", "a man plays the guitar in the park", "hi"]
    token_ids = minilm_tokenizer(sentences)["input_ids"]
    ours = pad_token_ids(token_ids, minilm_tokenizer.pad_token_id, True)
    theirs = minilm_tokenizer(sentences, padding=True, return_tensors="pt")
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(ours[name], theirs[name]), name


def test_batches_are_longest_first_and_cover_every_row_once(minilm_tokenizer):
    token_ids = minilm_tokenizer(corpus(50))["input_ids"]
    batches = length_sorted_batches(token_ids, 8)
    rows = [row for batch in batches for row in batch]
    assert sorted(rows) == list(range(50)) and all(len(batch) == 8 for batch in batches[:-1])
    lengths = [len(token_ids[row]) for row in rows]
    assert lengths == sorted(lengths, reverse=True)
    padded = list(padded_batches(token_ids, batches, minilm_tokenizer))
    assert [batch.tolist() for batch, _ in padded] == batches
    assert padded[0][1]["input_ids"].shape == (8, max(lengths))


def test_prefetch_keeps_order_raises_the_producers_error_and_stops_with_the_consumer():
    assert list(prefetch(iter(range(100)), depth=2)) == list(range(100))

    def failing():
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(prefetch(failing()))
    produced = []

    def endless():
        while True:
            produced.append(len(produced))
            yield produced[-1]

    items = prefetch(endless(), depth=2)
    assert next(items) == 0
    items.close()  # the consumer stops: the producer thread ends instead of filling the queue forever
    assert not any(thread.name == "gausscse-encode-prefetch" for thread in threading.enumerate())
    assert len(produced) <= 5


def test_dtype_runs_autocast_and_bad_dtypes_are_refused(model):
    sentences = corpus(40)
    expected = model.encode(sentences)
    bf16 = model.encode(sentences, dtype=torch.bfloat16)
    assert bf16.mu.dtype == torch.float32 and not torch.equal(bf16.mu, expected.mu)  # it did run in bf16
    torch.testing.assert_close(bf16.mu, expected.mu, rtol=0.05, atol=0.05)
    with pytest.raises(ValueError, match="dtype must be"):
        model.encode(sentences, dtype=torch.int8)
