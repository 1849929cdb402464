"""The examples' code paths, run on the tiny fixtures and a few rows of the shared data."""

import importlib.util
import json
import math
import re
import tempfile

import pytest
from conftest import REPO, VOCAB


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.shared_data
def test_choi2021_grid_runs_on_albert(tiny_albert, data_home, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the example saves a chart: matplotlib (extra 'test')")
    example = load_example("choi2021_sentence_embeddings")
    chart = tmp_path / "chart.png"
    table = example.main(
        [
            "--model",
            tiny_albert,
            "--data-home",
            str(data_home),
            "--limit",
            "24",
            "--output",
            str(chart),
        ]
    )
    assert set(table) == {(p, r) for p in example.POOLINGS for r in example.REGIMES}
    assert table["cnn", "none"] is None  # an untrained CNN is not reported
    values = [v for v in table.values() if v is not None]
    assert len(values) == 11 and all(math.isfinite(v) and -100 <= v <= 100 for v in values)
    # the two fine-tuning regimes train different encoders
    assert table["mean", "sts"] != table["mean", "nli+sts"]
    out = capsys.readouterr().out
    assert "CNN-SBERT > SBERT (mean)" in out and "cnn" in out
    assert chart.stat().st_size > 10_000


def test_choi2021_claims_compare_fine_tuned_cells_with_frozen_ones():
    # best() took the frozen cell too: a frozen mean above both fine-tuned ones made
    # "CNN-SBERT > SBERT (mean)" compare with the frozen mean, and the frozen with itself
    choi = load_example("choi2021_sentence_embeddings")
    table = {("mean", "none"): 80.0, ("mean", "sts"): 70.0, ("mean", "nli+sts"): 75.0,
             ("cls", "none"): 60.0, ("cnn", "none"): None, ("cnn", "sts"): 78.0,
             ("cnn", "nli+sts"): 77.0}  # fmt: skip
    claims = {text: (holds, a, b) for text, holds, a, b in choi.check_ordering(table)}
    assert claims["CNN-SBERT > SBERT (mean)"] == (True, 78.0, 75.0)
    assert claims["SBERT (mean, fine-tuned) > mean (frozen)"] == (False, 75.0, 80.0)
    assert claims["mean (frozen) > CLS (frozen)"] == (True, 80.0, 60.0)


@pytest.mark.shared_data
def test_few_shot_curve_runs(tiny_bert, data_home, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib", reason="the example saves a chart: matplotlib (extra 'test')")
    example = load_example("few_shot_sun2019")
    chart = tmp_path / "curve.png"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    results = example.main(
        ["--model", tiny_bert, "--data-home", str(data_home), "--quick", "--output", str(chart)]
    )
    assert not list(temporary.iterdir())  # the ITPT checkpoint is removed (89 MB a real run)
    assert set(results) == set(example.METHODS)
    for method in example.METHODS:
        assert sorted(results[method]) == [16, 64]
        assert all(0 <= mean <= 1 and draws == 3 for mean, _, draws in results[method].values())
    assert "ITPT + fine-tuned" in capsys.readouterr().out
    assert chart.stat().st_size > 10_000


@pytest.mark.shared_data
def test_few_shot_curves_of_separate_runs_merge(tiny_bert, data_home, tmp_path, capsys):
    """--results keeps each run's curves: a second run of one method adds its curve beside the
    first run's, a curve run again replaces its old figures, and a stored curve without one of
    the sizes asked for is refused with the command that fills it in."""
    pytest.importorskip("matplotlib", reason="the example saves a chart: matplotlib (extra 'test')")
    example = load_example("few_shot_sun2019")
    stored = tmp_path / "curves.json"
    base = ["--model", tiny_bert, "--data-home", str(data_home)]
    base += ["--output", str(tmp_path / "curve.png"), "--results", str(stored)]
    common = [*base, "--quick"]  # sizes 16 and 64
    frozen = example.main([*common, "--methods", "frozen"])
    assert list(frozen) == ["frozen"]
    both = example.main([*common, "--methods", "contrastive"])
    assert list(both) == ["frozen", "contrastive"]  # METHODS order
    assert both["frozen"] == frozen["frozen"]  # read back from the file, unchanged
    out = capsys.readouterr().out
    assert re.search(r"^\s+16\s+3\s+\S+ ±\S+\s+\S+ ±\S+$", out, re.MULTILINE), out
    with open(stored, encoding="utf-8") as handle:
        curves = json.load(handle)
    curves["frozen"]["16"] = [0.5, 0.0, 3]  # another run's figures
    with open(stored, "w", encoding="utf-8") as handle:
        json.dump(curves, handle)
    again = example.main([*common, "--methods", "frozen"])
    assert again["frozen"] == frozen["frozen"] and again["contrastive"] == both["contrastive"]
    with pytest.raises(ValueError, match=r"'contrastive' curve has no figures at sizes \[32\]"):
        example.main([*base, "--methods", "frozen", "--sizes", "16,32", "--dev", "50"])


@pytest.mark.shared_data
def test_itpt_comparison_runs(tiny_bert, data_home, capsys):
    example = load_example("itpt_imdb_sun2019")
    errors = example.main(["--model", tiny_bert, "--data-home", str(data_home), "--quick"])
    assert set(errors) == {"BERT-FiT", "BERT-ITPT-FiT"}
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    n_valid = int(re.search(r"(\d+) validation", out).group(1))
    assert n_valid > 0
    for name, values in errors.items():
        assert len(values) == 1 and 0 <= values[0] <= 100
        # an error rate over n_valid reviews: a whole number of wrong reviews
        wrong = values[0] * n_valid / 100
        assert wrong == pytest.approx(round(wrong), abs=1e-6), (name, values)
        # the printed table and the per-seed lines show the returned values
        row = re.search(rf"^{re.escape(name)}\s+(\S+) ± (\S+)\s", out, re.MULTILINE)
        assert row, out
        assert float(row.group(1)) == pytest.approx(values[0], abs=0.05)
        assert float(row.group(2)) == 0.0  # one seed: no spread
        seed_line = re.search(rf"{re.escape(name)} seed 0: error (\S+) %", err)
        assert seed_line and float(seed_line.group(1)) == pytest.approx(values[0], abs=0.05)
    # ITPT ran masked-LM steps (FiT did not): one curve, of finite, plausible losses
    curves = re.findall(r"masked-LM loss per pass over the reviews \(seed (\d+)\): (.*)", out)
    assert [seed for seed, _ in curves] == ["0"], out
    losses = [float(v) for v in curves[0][1].split(", ")]
    assert losses and all(math.isfinite(v) for v in losses)
    # a cross-entropy over the vocabulary: positive, and a random head starts near log(vocab)
    assert all(0 < v < 2 * math.log(len(VOCAB)) for v in losses), losses
    change = float(re.search(r"ITPT changed the error by (\S+) points", out).group(1))
    expected = errors["BERT-ITPT-FiT"][0] - errors["BERT-FiT"][0]
    assert change == pytest.approx(expected, abs=0.05)


@pytest.mark.shared_data
def test_stsb_cross_encoder_example_runs(tiny_bert, data_home, capsys):
    example = load_example("stsb_cross_encoder")
    results = example.main(
        ["--model", tiny_bert, "--data-home", str(data_home), "--n-train", "32", "--n-test", "40"]
    )
    assert list(results) == list(example.PUBLISHED)
    assert all(math.isfinite(v) and -100 <= v <= 100 for v in results.values()), results
    out = capsys.readouterr().out
    assert "STS-B test (40 pairs), Spearman x100; fine-tuned on 32 training pairs" in out
    for name, value in results.items():  # the table shows what main returned
        row = re.search(rf"^{re.escape(name)}\s+(\S+)\s", out, re.MULTILINE)
        assert row and float(row.group(1)) == pytest.approx(value, abs=0.005), name


@pytest.mark.shared_data
def test_layer_grid_runs(tiny_bert, data_home, capsys):
    example = load_example("layer_grid")
    args = ["--model", tiny_bert, "--data-home", str(data_home), "--limit", "30"]
    sts, sst = example.main([*args, "--n-train", "40"])
    labels = [label for label, _, _ in example.readouts(2)]  # the tiny BERT has 2 layers
    assert labels[:3] == ["0", "1", "2"] and len(labels) == 6
    assert set(sts) == set(sst) == {(label, p) for label in labels for p in example.POOLINGS}
    # [CLS] of the embedding output is one vector for every sentence: reported as n/a
    assert math.isnan(sts["0", "cls"]) and math.isnan(sst["0", "cls"])
    rest = [key for key in sts if key != ("0", "cls")]
    assert all(-100 <= sts[k] <= 100 and 0 <= sst[k] <= 1 for k in rest)
    # the last two layers concatenated and max-pooled token by token differ
    assert sts["last 2 (concat)", "mean"] != sts["last 2 (max)", "mean"]
    out = capsys.readouterr().out
    row = re.search(r"^1\s+(\S+)\s+(\S+)", out, re.MULTILINE)
    assert row and float(row.group(2)) == pytest.approx(sts["1", "mean"], abs=0.005)
    assert "n/a" in out and "best STS-B: layer" in out


def test_torchrun_example_runs_in_one_process(tiny_bert, capsys):
    example = load_example("fine_tune_torchrun")
    result = example.main(["--model", tiny_bert, "--limit", "40", "--max-epochs", "1"])
    assert len(result["loss_curve"]) == 1 and 0 <= result["accuracy"] <= 1
    assert "1 process(es): fit in" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name", ["choi2021_sentence_embeddings", "few_shot_sun2019", "itpt_imdb_sun2019", "layer_grid"]
)
def test_a_mistyped_option_is_an_error_not_the_full_run(name, monkeypatch, capsys):
    """--quik (for --quick) must not start the hours-long default run; sphinx-gallery's own
    argv alone is let through."""
    import sys

    example = load_example(name)
    with pytest.raises(SystemExit):
        example.parse_args(["--quik"])
    assert "unrecognized arguments: --quik" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "sphinx_gallery", object())
    example.parse_args(["--gallery-own-flag"])


@pytest.mark.parametrize(
    "name, quick, explicit",
    [
        ("few_shot_sun2019", {"sizes": [16, 64], "mlm_steps": 10}, ["--mlm-steps", "33"]),
        ("itpt_imdb_sun2019", {"seeds": 1, "epochs": 1, "limit": 160}, ["--seeds=3"]),
    ],
)
def test_quick_sets_budgets_but_keeps_options_given_with_it(name, quick, explicit):
    example = load_example(name)
    args = vars(example.parse_args(["--quick"]))
    assert {key: args[key] for key in quick} == quick
    given = vars(example.parse_args(["--quick", *explicit]))
    option, value = explicit[0].split("=") if "=" in explicit[0] else explicit
    key = option.lstrip("-").replace("-", "_")
    assert given[key] == int(value) and args[key] != int(value)
    given.pop(key), args.pop(key)
    assert given == args  # the other quick budgets stand
