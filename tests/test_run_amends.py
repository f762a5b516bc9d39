"""Amendments to a byte-identical runs file (baige_plan/io/run_amends.py): they fill fields a row leaves null from
the sources they name, never override a stated one, and bad amendment files fail with the file and field."""

from pathlib import Path

import pytest

from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs

CAT = Catalog.create()


def test_published_calibration_gets_the_sc21_scripts_settings():
    rows = {c.id: c for c in load_runs("tests/data/published_calibration.yaml", CAT)}
    # run_table_1.sh @285068c8: 145B TP8 PP8 MBS=2, 80 layers, --num-layers-per-virtual-pipeline-stage 5 ->
    # 80 / 8 / 5 = 2 chunks; 1.7B MBS=16; 1T: no interleaving flag
    s = rows["narayanan2021_t1_145p6b"].strategy
    assert (s.micro_batch, s.vpp) == (2, 2)
    assert rows["narayanan2021_t1_1p7b"].strategy.micro_batch == 16
    assert (rows["narayanan2021_t1_1008p0b"].strategy.micro_batch, rows["narayanan2021_t1_1008p0b"].strategy.vpp) == (1, 1)
    assert rows["narayanan2021_t1_529p6b"].strategy.vpp == 3                 # 105 / 35 / 1
    # BLOOM: 4 Omni-Path 100 Gb/s links per 8-GPU node
    g = rows["bloom176b_tr11_384gpu"].cluster.groups[0]
    assert g.scaleout_Gbps == 50
    # rows without an amendment are as the file states them (Table 2 gives its own micro-batch)
    assert rows["narayanan2021_t2_zero3_174b_384gpu"].strategy.micro_batch >= 1


def _write(tmp_path: Path, amend: str) -> Path:
    runs = tmp_path / "runs.yaml"
    runs.write_text(Path("tests/data/published_calibration.yaml").read_text())
    (tmp_path / "runs.amend.yaml").write_text(amend)
    return runs


def test_amendment_never_overrides_a_stated_field(tmp_path):
    runs = _write(tmp_path, "rows:\n- id: bloom176b_tr11_384gpu\n  set: {parallel.micro_batch: 4}\n"
                            "  source: x\n  why: y\n")
    with pytest.raises(InputError) as e:
        load_runs(runs, CAT)
    assert "runs.amend.yaml" in str(e.value) and "set.parallel.micro_batch" in str(e.value)
    assert "states micro_batch = 2" in str(e.value)


@pytest.mark.parametrize("amend, field", [
    ("rows:\n- id: nope\n  set: {parallel.vpp: 2}\n  source: x\n  why: y\n", "rows[0].id"),
    ("rows:\n- id: bloom176b_tr11_384gpu\n  set: {results.step_time_s: 1}\n  source: x\n  why: y\n",
     "rows[0].set.results.step_time_s"),
    ("rows:\n- id: bloom176b_tr11_384gpu\n  set: {parallel.vpp: 2}\n  why: y\n", "rows[0]"),
])
def test_bad_amendments_name_file_and_field(tmp_path, amend, field):
    with pytest.raises(InputError) as e:
        load_runs(_write(tmp_path, amend), CAT)
    assert e.value.source.endswith("runs.amend.yaml") and e.value.field.startswith(field)
