"""What a run tells the user (skbert._core.messages): progress bars and messages on stderr,
from rank 0 of a torchrun launch only."""

import pytest

from skbert._core import messages
from skbert._core.launch import Share


def test_progress_without_verbose_is_the_iterable_itself(capsys):
    items = [1, 2, 3]
    assert messages.progress(items, desc="Encoding", unit="text", verbose=0) is items
    assert capsys.readouterr() == ("", "")


def test_progress_with_verbose_draws_a_bar_on_stderr(capsys):
    bar = messages.progress(range(3), desc="Encoding", unit="text", verbose=1)
    assert list(bar) == [0, 1, 2]
    out, err = capsys.readouterr()
    assert out == "" and "Encoding" in err and "3/3" in err


def test_report_writes_a_line_on_stderr(capsys):
    messages.report("masked-LM pre-training: 12 windows")
    assert capsys.readouterr() == ("", "masked-LM pre-training: 12 windows\n")


@pytest.mark.parametrize("rank, shown", [(0, True), (1, False)])
def test_only_rank_0_of_a_launch_shows_anything(monkeypatch, capsys, rank, shown):
    monkeypatch.setattr(messages, "current_share", lambda: Share(rank=rank, world=2))
    items = [1, 2]
    bar = messages.progress(items, desc="Fine-tuning", unit="step", verbose=1)
    assert list(bar) == items and (bar is not items) == shown
    messages.report("done")
    err = capsys.readouterr().err
    assert ("done\n" in err) == shown and ("Fine-tuning" in err) == shown
