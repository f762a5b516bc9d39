"""Issue 12 item 4: chip-hour prices, `plan --objective throughput|time|cost --tokens N`, `whatif`.

Cost = hours x sum over the devices a plan USES of their price (idle devices are not paid; the whole
cluster's bill is reported beside it): cost/money.py. whatif pays every device of a mix it rents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.money import parse_price_options
from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.chips import load_chip_file

RUN = CliRunner()
CAT = Catalog.create()
ROOT = Path(__file__).resolve().parents[1]
TINY = {"schema": "baige-plan/model/v1", "name": "tiny-16l", "layers": 16, "hidden": 2048, "heads": 16,
        "ffn_hidden": 8192, "vocab": 32000, "seq_len": 2048, "activation": "gelu"}
SMALL = {**TINY, "name": "tiny-8l", "layers": 8, "hidden": 1024, "ffn_hidden": 4096}


def _run(args, code=0):
    r = RUN.invoke(app, [str(a) for a in args])
    assert r.exit_code == code, (r.exit_code, r.output)
    return r


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for m in (TINY, SMALL):
        p = d / f"{m['name']}.yaml"
        p.write_text(yaml.safe_dump(m, sort_keys=False))
        out[m["name"]] = p
    return out


# -- prices in the catalog -----------------------------------------------------------------------------
def test_builtin_prices_have_sources_and_dates():
    priced = {}
    for name in CAT.names("chips"):
        path = CAT.find("chips", name)
        doc = yaml.safe_load(path.read_text())
        chip = load_chip_file(path)
        if "price" not in doc:
            assert chip.price_usd_per_device_hour is None
            continue
        item = doc["price"]["usd_per_device_hour"]
        cites = {**doc["sources"], **doc["price"].get("sources", {})}
        assert item["sources"] and all(k in cites for k in item["sources"])
        assert item["date"] and chip.price_date == str(item["date"])
        if item.get("estimated"):
            assert "/ 8" in item["note"]           # derived: the instance price / its devices, said in the note
        priced[name] = chip.price_usd_per_device_hour
    assert priced["h100-sxm5-80g"] == 6.88 and priced["a100-sxm4-80g"] == pytest.approx(27.44705 / 8, abs=1e-4)
    assert {"ascend-910b", "kunlun-p800"}.isdisjoint(priced)   # no public price: unknown
    assert CAT.chip("ascend-910b").price_usd_per_device_hour is None


def _chip_with_price(tmp_path: Path, block: str) -> Path:
    text = (ROOT / "chips" / "a100-sxm4-80g.yaml").read_text()
    text = text[:text.index("\nprice:")] + "\n" + block
    p = tmp_path / "pricey.yaml"
    p.write_text(text.replace("id: a100-sxm4-80g", "id: pricey"))
    return p


def test_price_block_loads_with_its_own_sources(tmp_path):
    p = _chip_with_price(tmp_path, 'price:\n  sources: {MINE: "our contract, 2026"}\n'
                         '  usd_per_device_hour: {value: 1.5, sources: [MINE], date: 2026-01-02}\n')
    chip = load_chip_file(p)
    assert chip.price_usd_per_device_hour == 1.5 and chip.price_date == "2026-01-02"


@pytest.mark.parametrize("block, field", [
    ('price:\n  usd_per_device_hour: {value: 1.5, sources: [GKW], date: "2026-01", currency: EUR}\n',
     "price.usd_per_device_hour.currency"),
    ('price:\n  usd: 1\n  usd_per_device_hour: {value: 1.5, sources: [GKW], date: "2026-01"}\n', "price.usd"),
    ('price:\n  usd_per_device_hour: {value: 1.5, date: "2026-01"}\n', "price.usd_per_device_hour.sources"),
    ('price:\n  usd_per_device_hour: {value: 1.5, sources: [NOPE], date: "2026-01"}\n',
     "price.usd_per_device_hour.sources"),
    ('price:\n  usd_per_device_hour: {value: 1.5, sources: [GKW]}\n', "price.usd_per_device_hour.date"),
    ('price:\n  usd_per_device_hour: {value: -1, sources: [GKW], date: "2026-01"}\n',
     "price.usd_per_device_hour.value"),
    ('price:\n  usd_per_device_hour: {value: 1, sources: [GKW], date: "last year"}\n',
     "price.usd_per_device_hour.date"),
])
def test_bad_price_block_exit_2_names_file_and_key(tmp_path, block, field):
    p = _chip_with_price(tmp_path, block)
    r = _run(["validate", p], code=2)
    assert str(p) in r.output and field in r.output


def test_price_option_parsing():
    assert parse_price_options(["a=1.5", "gpu=0"]) == {"a": 1.5, "gpu": 0.0}
    for bad in (["a"], ["=1"], ["a=x"], ["a=-1"], ["a=nan"], ["a=1", "a=2"]):
        with pytest.raises(InputError):
            parse_price_options(bad)


# -- plan --tokens / --objective -------------------------------------------------------------------------
def test_time_and_cost_hand_computed_from_step_time():
    tokens, gb, seq = 3e9, 64, 2048
    r = _run(["plan", "opt-350m", "a100-sxm4-80g:2x8", "--global-batch", gb, "--seq-len", seq, "--tokens", tokens,
              "--objective", "time", "--top", 2, "--format", "json"])
    doc = json.loads(r.stdout)
    for p in doc["plans"]:
        t = p["training"]
        steps = tokens / (gb * seq)
        hours = steps * p["step_time_s"] / 3600
        usd = hours * 16 * (27.44705 / 8)            # 16 devices x the p4de price per GPU (chips/a100-sxm4-80g.yaml)
        assert t["steps"] == pytest.approx(steps, rel=1e-5)
        assert t["hours"] == pytest.approx(hours, rel=1e-5)
        assert t["usd"] == pytest.approx(usd, rel=1e-4)
        assert t["cluster_usd"] == t["usd"] and t["devices_paid"] == 16 and t["objective"] == "time"
    # time and throughput rank alike on a fixed cluster
    r2 = _run(["plan", "opt-350m", "a100-sxm4-80g:2x8", "--global-batch", gb, "--seq-len", seq, "--top", 2,
               "--format", "json"])
    assert [p["strategy"] for p in json.loads(r2.stdout)["plans"]] == [p["strategy"] for p in doc["plans"]]


def test_price_override_and_plan_file(tmp_path):
    out = tmp_path / "p.yaml"
    r = _run(["plan", "opt-350m", "h100-sxm5-80g:1x8", "--global-batch", 32, "--tokens", 1e9, "--objective", "cost",
              "--price", "h100-sxm5-80g=2", "--out", out, "--format", "json"])
    t = json.loads(r.stdout)["plans"][0]["training"]
    assert t["usd_per_device_hour"] == {"h100-sxm5-80g": 2.0} and t["price_origin"]["h100-sxm5-80g"] == "--price"
    assert t["usd"] == pytest.approx(t["hours"] * 8 * 2.0, rel=1e-5)
    doc = yaml.safe_load(out.read_text())
    assert doc["estimate"]["training"]["usd"] == t["usd"]
    _run(["validate", out])
    _run(["evaluate", "--plan", out, "--format", "json"])


def test_topology_group_price_overrides_chip(tmp_path, models):
    topo = {"schema": "baige-plan/topology/v1", "name": "own", "groups": [
        {"name": "gpu", "chip": "a100-sxm4-80g", "nodes": 1, "devices_per_node": 8, "price_usd_per_device_hour": 1.25}]}
    tp = tmp_path / "own.yaml"
    tp.write_text(yaml.safe_dump(topo, sort_keys=False))
    out = tmp_path / "plan.yaml"
    r = _run(["plan", models["tiny-8l"], tp, "--global-batch", 16, "--tokens", 1e8, "--objective", "cost",
              "--out", out, "--format", "json"])
    t = json.loads(r.stdout)["plans"][0]["training"]
    assert t["usd_per_device_hour"] == {"gpu": 1.25} and t["price_origin"]["gpu"] == "topology group"
    doc = yaml.safe_load(out.read_text())
    assert doc["inputs"]["cluster"]["groups"][0]["price_usd_per_device_hour"] == 1.25
    _run(["validate", out])
    # --price beats the topology, by group name
    r = _run(["plan", models["tiny-8l"], tp, "--global-batch", 16, "--tokens", 1e8, "--price", "gpu=2",
              "--format", "json"])
    assert json.loads(r.stdout)["plans"][0]["training"]["usd_per_device_hour"] == {"gpu": 2.0}


def test_cost_objective_errors():
    r = _run(["plan", "opt-350m", "a100-sxm4-80g:1x8", "--global-batch", 8, "--objective", "cost"], code=2)
    assert "--tokens" in r.output
    r = _run(["plan", "opt-350m", "ascend-910b:1x8", "--global-batch", 8, "--tokens", 1e9, "--objective", "cost"],
             code=2)
    assert "ascend-910b" in r.output and "price.usd_per_device_hour" in r.output
    r = _run(["plan", "opt-350m", "a100-sxm4-80g:1x8", "--global-batch", 8, "--tokens", 1e9, "--price", "h100=3"],
             code=2)
    assert "--price" in r.output and "h100" in r.output
    _run(["plan", "opt-350m", "a100-sxm4-80g:1x8", "--global-batch", 8, "--tokens", -5], code=2)
    # --tokens with an unknown price still reports the time; the cost is null
    r = _run(["plan", "opt-350m", "ascend-910b:1x8", "--global-batch", 8, "--tokens", 1e9, "--format", "json"])
    t = json.loads(r.stdout)["plans"][0]["training"]
    assert t["hours"] > 0 and t["usd"] is None


def test_cost_objective_leaves_an_expensive_slow_group_idle(models):
    """A100 x8 + V100 x8 (fp16): the fastest plan uses both groups; the V100s add ~10% speed for twice the
    devices, so paying only for devices used, the cheapest plan runs on the A100s alone."""
    cl = "a100-sxm4-80g:1x8+v100-sxm2-32g:1x8"
    base = ["plan", models["tiny-16l"], cl, "--global-batch", 64, "--precision", "fp16", "--tokens", 1e9,
            "--format", "json"]
    fast = json.loads(_run(base + ["--objective", "throughput"]).stdout)["plans"][0]
    cheap = json.loads(_run(base + ["--objective", "cost"]).stdout)["plans"][0]
    assert fast["devices_used"] == {"a100-sxm4-80g": 8, "v100-sxm2-32g": 8}
    assert cheap["devices_used"] == {"a100-sxm4-80g": 8}
    assert [g["group"] for g in cheap["idle_devices"]] == ["v100-sxm2-32g"]
    assert fast["step_time_s"] < cheap["step_time_s"]
    assert cheap["training"]["usd"] < fast["training"]["usd"]
    # hand-computed: hours x devices used x price
    a100, v100 = 27.44705 / 8, 31.212 / 8
    for p, rate in ((fast, 8 * a100 + 8 * v100), (cheap, 8 * a100)):
        hours = 1e9 / (64 * 2048) * p["step_time_s"] / 3600
        assert p["training"]["usd"] == pytest.approx(hours * rate, rel=1e-4)
        assert p["training"]["cluster_usd"] == pytest.approx(hours * (8 * a100 + 8 * v100), rel=1e-4)
    # free V100s: the cheapest plan runs on them alone, for nothing
    free = json.loads(_run(base + ["--objective", "cost", "--price", "v100-sxm2-32g=0"]).stdout)["plans"][0]
    assert free["devices_used"] == {"v100-sxm2-32g": 8} and free["training"]["usd"] == 0


def test_cost_plan_file_reevaluates(models, tmp_path):
    out = tmp_path / "cheap.yaml"
    _run(["plan", models["tiny-16l"], "a100-sxm4-80g:1x8+v100-sxm2-32g:1x8", "--global-batch", 64,
          "--precision", "fp16", "--tokens", 1e9, "--objective", "cost", "--out", out])
    doc = yaml.safe_load(out.read_text())
    assert {st["group"] for sh in doc["pipelines"] for st in sh["stages"]} == {"a100-sxm4-80g"}
    r = _run(["evaluate", "--plan", out, "--format", "json"])
    assert json.loads(r.stdout)["step_time_s"] == pytest.approx(doc["estimate"]["step_time_s"], rel=1e-5)
    _run(["validate", out])


# -- whatif ----------------------------------------------------------------------------------------------
def _whatif(models, *extra, code=0):
    return _run(["whatif", models["tiny-8l"], "--pool", "a100-sxm4-80g:16:2", "--pool", "h100-sxm5-80g:16:5",
                 "--global-batch", 32, "--tokens", 1.5e10, "--format", "json", *extra], code=code)


@pytest.fixture(scope="module")
def deadline_run(models):
    return json.loads(_whatif(models, "--deadline", 1).stdout)


def test_whatif_cheapest_mix_meeting_deadline(deadline_run):
    doc = deadline_run
    opts = doc["options"]
    mixes = {o["mix"] for o in opts}
    # grid: each chip at 1 and 2 nodes; the pair at every combination of those
    assert {"a100-sxm4-80g:1x8", "a100-sxm4-80g:2x8", "h100-sxm5-80g:1x8", "h100-sxm5-80g:2x8"} <= mixes
    assert {"a100-sxm4-80g:2x8+h100-sxm5-80g:1x8", "a100-sxm4-80g:1x8+h100-sxm5-80g:2x8"} <= mixes
    price = {"a100-sxm4-80g": 2.0, "h100-sxm5-80g": 5.0}
    for o in opts:     # hand-check every row: hours from tokens/s, USD = hours x every rented device x price
        hours = 1.5e10 / o["tokens_per_s"] / 3600
        assert o["hours"] == pytest.approx(hours, rel=1e-4)
        rate = sum(g["nodes"] * g["devices_per_node"] * price[g["chip"]] for g in o["groups"])
        assert o["usd"] == pytest.approx(hours * rate, rel=1e-4)
        assert o["meets"] == (o["hours"] <= 1)
    meets = [o for o in opts if o["meets"]]
    assert meets and [o["usd"] for o in meets] == sorted(o["usd"] for o in meets)
    assert opts[:len(meets)] == meets                                   # the mixes meeting it come first
    late = opts[len(meets):]
    assert [o["hours"] for o in late] == sorted(o["hours"] for o in late)   # then the closest
    best = doc["best"]
    assert best["mix"] == min(meets, key=lambda o: o["usd"])["mix"]
    # the cheapest option overall misses the deadline: the deadline changes the answer
    assert min(opts, key=lambda o: o["usd"])["mix"] != best["mix"]


def test_whatif_homogeneous_row_is_the_plan_search(models, deadline_run):
    row = next(o for o in deadline_run["options"] if o["mix"] == "h100-sxm5-80g:1x8")
    # the search's fastest plan (plan lists ties simpler first, so the fastest need not be the first row)
    r = _run(["plan", models["tiny-8l"], "h100-sxm5-80g:1x8", "--global-batch", 32, "--top", 8, "--format", "json"])
    fastest = min(p["step_time_s"] for p in json.loads(r.stdout)["plans"])
    assert row["step_time_s"] == pytest.approx(fastest, rel=1e-6)


def test_whatif_budget_and_no_mix_exit_1(models, deadline_run):
    cheapest = min(deadline_run["options"], key=lambda o: o["usd"])
    r = _whatif(models, "--budget", cheapest["usd"] * 1.001)
    doc = json.loads(r.stdout)
    assert doc["best"]["mix"] == cheapest["mix"]
    r = _whatif(models, "--budget", cheapest["usd"] * 0.5, code=1)
    assert "closest" in r.output and cheapest["mix"] in r.output
    r = _whatif(models, "--deadline", 1e-3, code=1)
    assert "no mix meets the deadline" in r.output


def test_whatif_input_errors(models):
    base = ["whatif", models["tiny-8l"], "--global-batch", 8, "--tokens", 1e9]
    r = _run(base + ["--pool", "a100-sxm4-80g:8", "--deadline", 1, "--budget", 5], code=2)
    assert "exactly one" in r.output
    r = _run(base + ["--pool", "ascend-910b:8", "--deadline", 1], code=2)
    assert "ascend-910b" in r.output and "price.usd_per_device_hour" in r.output
    r = _run(base + ["--pool", "a100-sxm4-80g", "--deadline", 1], code=2)
    assert "--pool" in r.output
    r = _run(base + ["--pool", "a100-sxm4-80g:8:x", "--deadline", 1], code=2)
    assert "USD_PER_DEVICE_HOUR" in r.output
