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


def test_warnings_inside_a_grid_search_name_the_users_line(tiny_bert):
    """Between the user's GridSearchCV.fit and skbert lie scikit-learn's and joblib's frames:
    the warning named joblib/parallel.py."""
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    from skbert import BertSentenceTransformer

    pipe = Pipeline(
        [("bert", BertSentenceTransformer(tiny_bert, wise_alpha=0.5)), ("lr", LogisticRegression())]
    )
    texts, labels = ["good", "bad", "fine", "dull", "great", "awful"], [1, 0, 1, 0, 1, 0]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        GridSearchCV(pipe, {"lr__C": [1.0]}, cv=2).fit(texts, labels)
    mine = [w for w in record if "wise_alpha" in str(w.message)]
    assert len(mine) == 3  # two folds and the refit
    assert {w.filename for w in mine} == {__file__}, {w.filename for w in mine}


def test_the_stacklevel_stops_at_the_outermost_frame_when_all_are_the_librarys(monkeypatch):
    """In a joblib worker's task every frame is a library's: the level must name a frame of
    the stack (the outermost), not one past it (Python then names ``sys:1``)."""
    import sys

    class Everything:
        def __contains__(self, name):
            return True

    monkeypatch.setattr(messages, "_LIBRARY_FRAMES", Everything())
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    assert messages.user_stacklevel() == depth
