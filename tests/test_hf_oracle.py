"""Every architecture transformers ships, as an oracle: posbook's RoPE frequencies and KV-cache bytes equal
transformers' own modules, or posbook refuses with an error naming what it does not model. A silent wrong number
fails, unless it is one of the reviewed deviations recorded with its reason.

The expected outcomes are ``src/posbook/data/hf_coverage.json`` (the page "Inspect your model" lists its refusals
and deviations); ``tests/hf_oracle.py`` holds the machinery and rewrites the record with ``--write``.
"""

import json
import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

PINNED = re.search(r"^transformers==(\S+)$", (Path(__file__).resolve().parents[1] / "requirements.txt").read_text(),
                   re.M).group(1)
if transformers.__version__ != PINNED:
    pytest.skip(f"the oracle's record is for transformers {PINNED}, this is {transformers.__version__}",
                allow_module_level=True)

import hf_oracle

RECORD = json.loads(hf_oracle.COVERAGE_FILE.read_text())
DEVIATIONS = RECORD["deviations"]


def _assert_as_recorded(key: str, got: dict, expected: dict) -> None:
    got = hf_oracle.summary(got)
    for check, out in got.items():
        if isinstance(out, dict) and out.get("status") == "mismatch":
            assert f"{key}/{check}" in DEVIATIONS, f"{key} {check}: posbook gives a wrong number: {out['detail']}"
    status = {c: o if isinstance(o, str) else o["status"] for c, o in got.items()} if "error" not in got else got
    expected_status = ({c: o if isinstance(o, str) else o["status"] for c, o in expected.items()}
                       if "error" not in expected and "covered_by" not in expected else expected)
    if "error" in got or "error" in expected:  # transformers cannot build this config on CPU at all
        assert ("error" in got) == ("error" in expected), (got, expected)
        return
    assert status == expected_status, f"{key}: outcomes changed; rerun `python tests/hf_oracle.py --write` and review"
    for check, out in got.items():
        if isinstance(out, dict) and out["status"] == "refused":
            assert out["detail"] == expected[check]["detail"], f"{key} {check}: posbook's refusal changed"


@pytest.mark.parametrize("model_type, model_class", hf_oracle.architectures(), ids=lambda x: str(x))
def test_architecture_matches_transformers_or_is_refused(model_type, model_class):
    try:
        got = hf_oracle.check_architecture(model_type, model_class)
    except Exception as e:  # transformers cannot build its own default config: recorded as such
        got = {"error": hf_oracle.err(e)}
    _assert_as_recorded(model_type, got, RECORD["architectures"][model_type])


@pytest.mark.parametrize("label", sorted(hf_oracle.hub_configs()))
def test_hub_config_matches_transformers_or_is_refused(label):
    model_type, raw = hf_oracle.hub_configs()[label]
    _assert_as_recorded(label, hf_oracle.check_hub_config(model_type, raw), RECORD["hub_configs"][label])


def test_the_record_covers_every_architecture_and_explains_every_deviation():
    assert set(RECORD["architectures"]) == {t for t, _ in hf_oracle.architectures()}
    assert RECORD["transformers"] == PINNED
    recorded = {f"{key}/{check}" for part in ("architectures", "hub_configs") for key, result in RECORD[part].items()
                for check, out in result.items() if isinstance(out, dict) and out.get("status") == "mismatch"}
    assert recorded == set(DEVIATIONS), "every recorded mismatch needs a reason, and every reason a mismatch"
    assert all(len(reason) > 40 for reason in DEVIATIONS.values())
