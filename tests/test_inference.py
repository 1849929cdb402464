"""The prediction wing (skbert._inference): its composition of the networks' seams computes what
the modules' eval forward computes, each text's bits its own; the CPU runner's groups and the
in-order thread pool."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

import numpy as np
import pytest
import torch

from skbert import BertSentenceTransformer
from skbert._inference.composition import combine_texts, encoder_of, pool_chunks, row_readers
from skbert._inference.cpu.runner import block_groups, run_on_cpu
from skbert._inference.ordered import in_order
from skbert._inference.predict import NoBar
from skbert._nn.network import SentenceEncoder, TaskNetwork
from skbert._text.encoding import row_blocks

#: rows of chunks: fewer than, as many as, and more than the rows of one fixed block (64)
N_ROWS = [1, 5, 64, 65, 150]


def _networks(path, chunk_pooling):
    """A SentenceEncoder (chunks pooled by ``chunk_pooling``) and a TaskNetwork on it."""
    fitted = BertSentenceTransformer(path, device="cpu").fit(["a"])
    readout = dataclasses.replace(fitted.readout_, truncation="chunks", chunk_pooling=chunk_pooling)
    torch.manual_seed(0)
    encoder = SentenceEncoder(fitted.network_.backbone, readout).eval()
    return encoder, TaskNetwork(encoder, n_outputs=3).eval()


def _chunks(n_rows, dim, seed):
    """Random chunk vectors with random owners (every text has a chunk)."""
    generator = torch.Generator().manual_seed(seed)
    vectors = torch.randn(n_rows, dim, generator=generator)
    n_texts = max(1, n_rows // 3)
    owner = torch.cat([torch.arange(n_texts), torch.randint(0, n_texts, (n_rows - n_texts,))])
    return vectors, owner[torch.randperm(n_rows, generator=generator)], n_texts


@pytest.mark.parametrize("chunk_pooling", ["attention", "mean", "max"])
@pytest.mark.parametrize("n_rows", N_ROWS)
def test_composition_equals_the_eval_forward(tiny_bert, chunk_pooling, n_rows):
    encoder, task = _networks(tiny_bert, chunk_pooling)
    vectors, owner, n_texts = _chunks(n_rows, encoder.output_dim, seed=n_rows)
    with torch.inference_mode():
        for network in (encoder, task):
            composed = combine_texts(network, vectors, owner, n_texts)
            plain = network.combine(vectors, owner, n_texts)
            assert composed.shape == plain.shape
            torch.testing.assert_close(composed, plain, rtol=1e-5, atol=1e-6)
            unchunked = combine_texts(network, vectors)  # no owner: one row per text
            torch.testing.assert_close(unchunked, network.combine(vectors), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_rows", N_ROWS)
def test_a_texts_bits_do_not_depend_on_the_other_texts(tiny_bert, n_rows):
    """Each text combined alone gives the bits it gets among all: the chunk scores and the
    output layer run on fixed-size blocks."""
    encoder, task = _networks(tiny_bert, "attention")
    vectors, owner, n_texts = _chunks(n_rows, encoder.output_dim, seed=n_rows + 1)
    with torch.inference_mode():
        for network in (encoder, task):
            together = combine_texts(network, vectors, owner, n_texts)
            for text in {0, n_texts // 2, n_texts - 1}:
                mine = owner == text
                alone = combine_texts(network, vectors[mine], owner[mine] * 0, 1)
                assert torch.equal(alone[0], together[text])


def test_pool_chunks_is_the_chunk_pooling(tiny_bert):
    encoder, _ = _networks(tiny_bert, "attention")
    vectors, owner, n_texts = _chunks(70, encoder.output_dim, seed=3)
    pooling = encoder.chunk_pooling
    with torch.inference_mode():
        got = pool_chunks(pooling, vectors, owner, n_texts)
        torch.testing.assert_close(got, pooling(vectors, owner, n_texts), rtol=1e-5, atol=1e-6)


def test_row_readers_and_the_cpu_runner_read_the_encoders_rows(tiny_model):
    encoder, task = _networks(tiny_model, "mean")
    assert encoder_of(task) is encoder and encoder_of(encoder) is encoder
    encode, read = row_readers(task)
    assert encode == encoder.encode_rows and read == encoder.read_rows
    encode, read = row_readers(encoder, all_layers=True)
    assert encode == encoder.all_layer_rows and read == encoder.read_all_layer_rows
    generator = torch.Generator().manual_seed(4)
    vocab = encoder.backbone.config.vocab_size
    rows = []
    for length in [3, 3, 5, 8, 8, 8, 12]:
        ids = torch.randint(5, vocab, (length,), generator=generator).tolist()
        rows.append((ids, [0] * length))
    blocks = list(row_blocks([len(ids) for ids, _ in rows], 16))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for all_layers in (False, True):
            got = run_on_cpu(task, rows, blocks, NoBar(), 2, 16, all_layers)
            encode, _ = row_readers(task, all_layers)
            with torch.inference_mode():
                for r, (ids, types) in enumerate(rows):
                    want = encode(torch.tensor([ids]), None, torch.tensor([types]))[0]
                    torch.testing.assert_close(got[r], want, rtol=1e-4, atol=1e-5)
    finally:
        torch.set_num_threads(threads)


def test_block_groups_are_whole_balanced_and_a_multiple_of_the_workers():
    real = [8, 8, 8, 4, 4, 4, 2, 2, 2, 1]
    lengths = [3, 4, 5, 9, 10, 11, 20, 21, 22, 60]
    blocks = [(np.arange(n), n) for n in real]
    tokens = {id(b): n * length for b, n, length in zip(blocks, real, lengths, strict=True)}
    groups = block_groups(blocks, lengths, 2, 100)  # 402 tokens: 5 groups of 100 -> 6
    assert [b for g in groups for b in g] == blocks  # every block once, in order
    assert len(groups) == 6
    sizes = [sum(tokens[id(b)] for b in g) for g in groups]
    assert max(sizes) <= 100 and min(sizes) >= 40, sizes  # about 402 / 6 each
    assert block_groups(blocks[:1], lengths[:1], 2, 100) == [blocks[:1]]
    assert block_groups([], [], 2, 100) == []
    assert len(block_groups(blocks, lengths, 2, 10**6)) == 2
    assert len(block_groups(blocks[:3], lengths[:3], 4, 10)) == 3  # fewer blocks than asked


def test_in_order_keeps_order_bounds_work_ahead_and_cancels_when_closed():
    started, lock = [], threading.Lock()

    def square(x):
        with lock:
            started.append(x)
        return x * x

    assert list(in_order(square, range(50), 2, "t")) == [(x, x * x) for x in range(50)]
    started.clear()
    with contextlib.closing(in_order(square, range(1000), 2, "t")) as results:
        assert next(results) == (0, 0)
    assert len(started) <= 1 + 2 * 2 + 1  # the one consumed, those in flight, one submitted


def _fresh_thread_count() -> int:
    found = []
    probe = threading.Thread(target=lambda: found.append(torch.get_num_threads()))
    probe.start()
    probe.join()
    return found[0]


def test_predictions_in_overlapping_threads_keep_the_process_thread_count(tiny_bert, monkeypatch):
    """Each prediction set torch to one thread and put back the count it found: when they
    overlapped, a caller found the one another had set and put that back, so every thread
    started afterwards (a web server's workers) predicted on one core; callers started during
    another's prediction also began with one."""
    import skbert._inference.predict as predict

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(["a"])
    texts = [f"the dog sat on the mat {'very ' * k}" for k in range(12)]
    alone = est.transform(texts)
    seen, outputs = [], {}
    run = predict.run_on_cpu

    def slow(network, rows, blocks, bar, cores, *args, **kwargs):
        seen.append(cores)
        time.sleep(0.2)  # the next caller starts while this one holds the count at one
        return run(network, rows, blocks, bar, cores, *args, **kwargs)

    monkeypatch.setattr(predict, "run_on_cpu", slow)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for _ in range(2):
            callers = [
                threading.Thread(target=lambda k=k: outputs.update({k: est.transform(texts)}))
                for k in range(3)
            ]
            for caller in callers:
                caller.start()
                time.sleep(0.05)
            for caller in callers:
                caller.join()
            assert _fresh_thread_count() == 2 and torch.get_num_threads() == 2
        assert seen == [2] * 6
    finally:
        torch.set_num_threads(before)
    for output in outputs.values():
        np.testing.assert_array_equal(output, alone)


def test_torch_threads_nested_yield_the_enclosing_count():
    """skbert.dask sets a partition's count around the prediction, which sets one: the
    prediction uses the partition's count, and both are put back."""
    from skbert._core.threads import torch_threads

    before = torch.get_num_threads()
    with torch_threads(3) as outer:
        assert outer == before and torch.get_num_threads() == 3
        with torch_threads(1) as inner:
            assert inner == 3 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == before and _fresh_thread_count() == before


def test_torch_threads_puts_back_the_callers_own_count_and_survives_a_failed_set():
    """A thread limited on its own (threadpoolctl) had the process's count after a
    prediction; a failing set_num_threads left a caller counted inside for good, so later
    callers were given a stale count."""
    from threadpoolctl import threadpool_limits

    import skbert._core.threads as threads

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threadpool_limits(1, user_api="openmp"):
            assert torch.get_num_threads() == 1
            with threads.torch_threads(1) as usable:
                assert usable == 2  # the process's count
            assert torch.get_num_threads() == 1  # its own limit, still
        with pytest.raises((RuntimeError, ValueError)):
            with threads.torch_threads(2**31):
                pass
        assert threads._inside == 0
        assert _fresh_thread_count() == 2
    finally:
        torch.set_num_threads(before)
