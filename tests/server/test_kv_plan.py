"""POST /v1/kv-plan against `tally kv-plan --json`, the CLI it serves: the same
bytes, crossover and budget for the loaded model and for a shape given in the
request, the crossover and budget checked against their definitions, and a
400 naming the field for each kind of bad input."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from conftest import default_model, need, tally_bin, tally_home


def cli_plan(*args: str) -> dict:
    out = subprocess.run([tally_bin(), "kv-plan", "--json", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def plan(server, body: dict) -> dict:
    status, _, out = server.post("/v1/kv-plan", body)
    assert status == 200, out
    return json.loads(out)


def same_layouts(api: dict, cli: dict) -> None:
    assert [l["layout"] for l in api["layouts"]] == [l["layout"] for l in cli["layouts"]]
    for a, c in zip(api["layouts"], cli["layouts"]):
        for k in ("attention", "kv_heads", "bytes_per_token", "bytes_per_token_past_window", "crossover_tokens",
                  "max_tokens"):
            assert a[k] == c[k], (a["layout"], k, a[k], c[k])
        assert [(t["tokens"], t["bytes"], t["allocated_bytes"]) for t in a["totals"]] == \
               [(t["tokens"], t["bytes"], t["allocated_bytes"]) for t in c["totals"]], a["layout"]


def test_the_loaded_model_with_a_budget_matches_the_cli(server):
    api = plan(server, {"budget": "1GiB", "tokens": [512, 8192]})
    cli = cli_plan("-m", str(default_model()), "--budget", "1GiB", "--tokens", "512,8192")
    assert api["shape_from"] == "model" and api["weights_from"] == "model"
    assert (api["layers"], api["heads"], api["kv_heads"], api["head_dim"]) == \
           (cli["layers"], cli["heads"], cli["kv_heads"], cli["head_dim"])
    assert api["weights_bytes"] == cli["weights_bytes"] and api["budget_bytes"] == 1 << 30
    same_layouts(api, cli)
    # The definitions (SmolLM2 has no sliding window): crossover = weights / (bytes per token), rounded up;
    # what fits = (budget - weights) / (bytes per token), rounded down.
    assert api["sliding_window"] == 0
    for l in api["layouts"]:
        assert l["crossover_tokens"] == math.ceil(api["weights_bytes"] / l["bytes_per_token"])
        assert l["max_tokens"] == ((1 << 30) - api["weights_bytes"]) // l["bytes_per_token"]
    # A budget in bytes is the same budget; the model's shape spelt out is still the model's (its weights apply).
    shape = {k: api[k] for k in ("layers", "heads", "kv_heads", "head_dim")}
    again = plan(server, {"budget": 1 << 30, "tokens": [512, 8192], **shape})
    assert again["shape_from"] == "model" and again["layouts"] == api["layouts"]


def test_a_shape_of_the_request_with_weights_and_budget_matches_the_cli(server):
    shape = {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128}
    flags = ["--layers", "32", "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "4096,131072",
             "--batch", "2", "--dtype", "q8_0"]
    api = plan(server, {**shape, "tokens": [4096, 131072], "batch": 2, "dtype": "q8_0",
                        "weights_bytes": "16GiB", "budget": "24GiB"})
    cli = cli_plan(*flags, "--weights-bytes", "16GiB", "--budget", "24GiB")
    assert api["shape_from"] == "request" and api["weights_from"] == "request"
    assert api["weights_bytes"] == 16 << 30 and api["budget_bytes"] == 24 << 30
    same_layouts(api, cli)
    # Without weights: no crossover, and the whole budget holds cache.
    api = plan(server, {**shape, "tokens": [4096], "budget": "24GiB"})
    assert api["weights_bytes"] is None and api["weights_from"] is None
    for l in api["layouts"]:
        assert l["crossover_tokens"] is None
        assert l["max_tokens"] == (24 << 30) // l["bytes_per_token"]
    # A shape of its own does not borrow the loaded model's weights.
    assert plan(server, {**shape})["weights_bytes"] is None


def test_a_model_with_a_sliding_window_is_sized_with_it(start_server):
    gemma = tally_home() / "models" / "gemma-3-270m-q4_k_m.gguf"
    need(gemma.exists(), f"Gemma 3 270M is not installed at {gemma} (scripts/fetch_model.sh gemma3-270m)")
    s = start_server("-m", str(gemma), "--parallel", "1", "-c", "1024")
    status, _, out = s.post("/v1/kv-plan", {"tokens": [256, 4096], "budget": "1GiB"})
    assert status == 200, out
    api = json.loads(out)
    cli = cli_plan("-m", str(gemma), "--tokens", "256,4096", "--budget", "1GiB")
    assert api["sliding_window"] == cli["sliding_window"] > 0 and api["window_layers"] == cli["window_layers"] > 0
    same_layouts(api, cli)
    # Past the window only the global layers grow; a batch of 1 also gets what `tally run -c N` allocates.
    model = api["layouts"][0]
    assert 0 < model["bytes_per_token_past_window"] < model["bytes_per_token"]
    assert all(t["allocated_bytes"] for t in model["totals"])
    # Another shape is not the model's: no window.
    status, _, out = s.post("/v1/kv-plan", {"layers": api["layers"] + 1})
    assert json.loads(out)["sliding_window"] == 0


@pytest.mark.parametrize("body, param", [
    ({"budget": "24XB"}, "budget"),
    ({"budget": 0}, "budget"),
    ({"budget": -5}, "budget"),
    ({"budget": True}, "budget"),
    ({"budget": 1.5}, "budget"),
    ({"budget": 1000}, "budget"),  # less than the model's weights
    ({"weights_bytes": []}, "weights_bytes"),
    ({"weights_bytes": "0"}, "weights_bytes"),
    ({"weights_bytes": "99999999999999999999"}, "weights_bytes"),
    ({"tokens": []}, "tokens"),
    ({"tokens": [0]}, "tokens"),
    ({"tokens": list(range(1, 258))}, "tokens"),
    ({"heads": 9, "kv_heads": 2}, "kv_heads"),
    ({"layers": 1 << 40}, "layers"),
    ({"layers": None}, "layers"),
    ({"dtype": "f8"}, "dtype"),
    ({"batch": "2"}, "batch"),
])
def test_bad_fields_get_a_400_naming_them(server, body, param):
    status, _, out = server.post("/v1/kv-plan", body)
    assert status == 400, out
    err = json.loads(out)["error"]
    assert err["param"] == param and err["message"], err
