"""Config values given at load time (keyword overrides of ``from_pretrained``, ``AutoModel``, sentence-transformers'
``config_kwargs``) or set later are checked as ``config.json``'s are: a bad one is refused with its name."""

from __future__ import annotations

import math

import pytest
from sentence_transformers import SentenceTransformer
from transformers import AutoConfig, AutoModel

from gausscse import GaussCSEConfig, GaussCSEModel

BAD_OVERRIDES = [
    ({"search_kl_weight": math.nan}, r"search_kl_weight must be a number in \[0, 1e\+06\], got nan"),
    ({"search_kl_weight": "0.5"}, r"search_kl_weight must be a number in \[0, 1e\+06\], got '0.5'"),
    ({"entailment_cosine_weight": -1.0}, r"entailment_cosine_weight must be a number in \[0, 1e\+06\], got -1.0"),
    ({"entailment_threshold": 2}, r"entailment_threshold must be a number in \[0, 1\], got 2"),
    ({"entailment_threshold": True}, r"entailment_threshold must be a number in \[0, 1\], got True"),
    ({"variance_layers": 99}, r"variance_layers must be at most the encoder's layers \(2\), got variance_layers=99"),
    ({"pooling": "max"}, r"pooling must be one of \('cls', 'mean'\), got 'max'"),
    ({"similarity_reduction": "median"}, r"median"),
]
ROUTES = {
    "GaussCSEModel": lambda folder, overrides: GaussCSEModel.from_pretrained(folder, **overrides),
    "GaussCSEConfig": lambda folder, overrides: GaussCSEConfig.from_pretrained(folder, **overrides),
    "AutoConfig": lambda folder, overrides: AutoConfig.from_pretrained(folder, trust_remote_code=True, **overrides),
    "AutoModel": lambda folder, overrides: AutoModel.from_pretrained(folder, trust_remote_code=True, **overrides),
    "SentenceTransformer": lambda folder, overrides: SentenceTransformer(
        str(folder), trust_remote_code=True, config_kwargs=overrides
    ),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("overrides", "message"), BAD_OVERRIDES, ids=lambda case: str(case))
def test_a_bad_override_is_refused_on_every_route(route, overrides, message, spread_model_folder):
    with pytest.raises(ValueError, match=message):
        ROUTES[route](spread_model_folder, overrides)


@pytest.mark.parametrize("route", ["GaussCSEModel", "AutoModel"])
def test_a_good_override_is_taken(route, spread_model_folder):
    model = ROUTES[route](spread_model_folder, {"search_kl_weight": 0.25, "entailment_threshold": 0.4})
    assert model.config.search_kl_weight == 0.25 and model.config.entailment_threshold == 0.4


def test_a_score_setting_set_later_is_checked(spread_model_folder):
    model = GaussCSEModel.from_pretrained(spread_model_folder)
    model.config.search_kl_weight = 0.5
    for name, value in [("search_kl_weight", math.inf), ("entailment_cosine_weight", "1"),
                        ("entailment_threshold", 1.5)]:  # fmt: skip
        with pytest.raises(ValueError, match=rf"{name} must be a number"):
            setattr(model.config, name, value)
    assert model.config.search_kl_weight == 0.5  # the refused values left the config as it was
    assert model.config.entailment_threshold is None
