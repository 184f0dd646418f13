"""Resume is exact: the training data is one global stream (zoo.data.sampler.GlobalOrder), so a run
resumed with more steps, or on another number of processes or nodes, continues at the same global
sample and trains like an uninterrupted run."""

import csv
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from conftest import ROOT, TINY_GPT, run_train
from zoo.data.sampler import GlobalOrder
from zoo.data.tinyshakespeare import TinyShakespeare
from zoo.data.windows import RandomWindows

QUICK = [*TINY_GPT, "test=false", "model.sample_tokens=0"]


def _losses(run_dir) -> dict[int, float]:
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def _loss_steps(run_dir) -> list[int]:
    """The steps of the training-loss rows of metrics.csv in the file's order (a step logged twice shows twice)."""
    with open(run_dir / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


def _global_steps(order_of_rank: list[GlobalOrder]) -> list[set[int]]:
    """The items of each global step, all ranks together."""
    return [set().union(*step) for step in zip(*[list(o) for o in order_of_rank])]


@pytest.mark.parametrize("shuffle,drop_last", [(False, False), (True, False), (True, True)])
def test_a_global_step_holds_the_same_items_for_any_number_of_processes(shuffle, drop_last):
    def orders(world: int) -> list[GlobalOrder]:
        return [GlobalOrder(50, 8, world, rank, shuffle, 3, drop_last) for rank in range(world)]

    one = _global_steps(orders(1))
    assert len(one) == (6 if drop_last else 7) == len(orders(2)[0])
    assert _global_steps(orders(2)) == _global_steps(orders(4)) == one
    # every rank gets as many items; the last partial step (50 = 6 * 8 + 2) is padded with its own items
    four = [list(o) for o in orders(4)]
    assert [len(b) for b in four[0]] == [len(b) for b in four[3]] == [2] * 6 + ([] if drop_last else [1])
    assert drop_last or four[2][-1] == four[0][-1]


def test_a_position_saved_under_two_processes_continues_under_one_across_epochs():
    first = [GlobalOrder(50, 8, 2, rank, True, 3, True) for rank in range(2)]
    for order in first:  # 4 of the 6 steps of epoch 0
        for _, __ in zip(range(4), order):
            pass
    state = first[0].state_dict()
    assert state == first[1].state_dict() == {"position": 32, "world_size": 2, "step_size": 8}
    resumed, straight = GlobalOrder(50, 8, 1, 0, True, 3, True), GlobalOrder(50, 8, 1, 0, True, 3, True)
    resumed.load_state_dict(state)
    rest = [set(b) for b in resumed] + [set(b) for b in resumed]  # the rest of epoch 0, then epoch 1
    whole = [set(b) for b in straight] + [set(b) for b in straight]
    assert rest == whole[4:] and whole[6] != whole[0]  # epoch 1 is another permutation


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_state_holds_the_position_of_the_last_batch_it_gave(workers):
    """With workers, indices run ahead of the batches given out: the saved position must not."""
    def loader() -> StatefulDataLoader:
        return StatefulDataLoader(list(range(40)), batch_sampler=GlobalOrder(40, 4, 1, 0, True, 5, False),
                                  num_workers=workers)

    first, straight = loader(), [b.tolist() for b in loader()]
    batches = iter(first)
    given = [next(batches).tolist() for _ in range(3)]
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert given + [b.tolist() for b in resumed] == straight


def test_per_process_batches_refuse_another_number_of_processes():
    order = GlobalOrder(20, 2, 1, 0, True, 0, False, batched=False)
    with pytest.raises(ValueError, match="saved under 2 processes .* under 1"):
        order.load_state_dict({"position": 4, "world_size": 2, "step_size": 2})


@pytest.mark.slow
@pytest.mark.parametrize("val_every", [20, 250])  # last.ckpt written at the validation of step 40 / at the end
def test_extending_a_finished_run_continues_the_data(tmp_path, shakespeare_dir, val_every):
    straight, run = tmp_path / "straight", tmp_path / "run"
    # the 60-step run's LR schedule in both
    common = [*QUICK, "optim.decay_steps=60", f"trainer.val_check_interval={val_every}"]
    run_train(straight, shakespeare_dir, *common, "trainer.max_steps=60")
    run_train(run, shakespeare_dir, *common, "trainer.max_steps=40")
    run_train(run, shakespeare_dir, *common, "trainer.max_steps=60", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    a, b = _losses(straight), _losses(run)
    assert _loss_steps(run) == list(range(60))  # the log holds both segments, each step once
    for step in b:
        assert b[step] == pytest.approx(a[step], abs=1e-6), step


@pytest.mark.slow
@pytest.mark.parametrize("at", [1, 33])  # the first step; one between the (absent) validations
def test_a_run_stopped_by_sigterm_saves_and_resumes_to_the_same_losses(tmp_path, shakespeare_dir, at):
    straight, run = tmp_path / "straight", tmp_path / "run"
    common = [*QUICK, "optim.decay_steps=60", "trainer.val_check_interval=250"]  # no checkpoint before the end
    run_train(straight, shakespeare_dir, *common, "trainer.max_steps=60")
    env = dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONUNBUFFERED="1")
    first = subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", *common,
                            "trainer.max_steps=60", "+callbacks.sigterm._target_=tests.sigterm_at.SigtermAt",
                            f"+callbacks.sigterm.step={at}"], env=env, cwd=ROOT, capture_output=True, timeout=300)
    assert first.returncode == 143
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == at
    run_train(run, shakespeare_dir, *common, "trainer.max_steps=60", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    a, b = _losses(straight), _losses(run)
    assert _loss_steps(run) == list(range(60))  # both segments, each step once
    for step in b:
        assert b[step] == pytest.approx(a[step], abs=1e-6), step


@pytest.mark.slow
def test_a_sigterm_during_the_test_stage_ends_the_run(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    env = dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONUNBUFFERED="1")
    # two training steps, then a test stage of 20,000 batches (the test windows are data.val_batches)
    args = [*QUICK, "trainer.max_steps=2", "trainer.limit_val_batches=1", "data.val_batches=20000", "test=true"]
    node = subprocess.Popen([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", *args], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (run / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:  # written as fit ends
        assert node.poll() is None
        time.sleep(0.2)
    time.sleep(3)
    node.send_signal(signal.SIGTERM)
    out = node.communicate(timeout=60)[0]  # it ran on for minutes before, until killed
    assert node.returncode == 143
    assert "`Trainer.fit` stopped: `max_steps=2` reached" in out and "SIGTERM at step 2: stopped" in out
    assert "test/loss" not in out  # the test stage did not finish


# --- several processes and nodes: a global batch of 8 windows, 6 + 6 steps ---------------------------

DDP = [*QUICK, "data.batch_size=8", "optim.decay_steps=12"]  # the LR schedule of the 12-step run
STEPS = 12


TRAINER = {1: ["trainer=cpu"], 2: ["trainer=ddp_cpu", "trainer.devices=2"]}


def _logged(run_dir, *extra: str) -> list[str]:
    return [*extra, "+callbacks.sample_log._target_=tests.sample_log.SampleLog",
            f"+callbacks.sample_log.path={run_dir.parent / (run_dir.name + '.samples')}"]


def _sample_indices(run_dir, shakespeare_dir, tmp_path) -> dict[int, set[int]]:
    """Global step -> the indices (into the training windows) its batch held, all ranks together."""
    data = TinyShakespeare(str(shakespeare_dir), str(tmp_path / "dm"), 8, 32, STEPS, 2, check=False)
    data.setup()
    windows = RandomWindows(data.splits["train"], 32, STEPS * 8, 1337)
    index = {tuple(windows[i][0].tolist()): i for i in range(len(windows))}
    steps: dict[int, set[int]] = {}
    for log in run_dir.parent.glob(run_dir.name + ".samples.rank*"):
        for line in log.read_text().splitlines():
            step, *tokens = map(int, line.split())
            steps.setdefault(step, set()).add(index[tuple(tokens)])
    return steps


def _straight_run(tmp_path, shakespeare_dir, world: int) -> tuple[dict[int, float], dict[int, set[int]]]:
    """Losses and sample indices of an uninterrupted 12-step run on ``world`` processes."""
    run = tmp_path / f"straight{world}"
    run_train(run, shakespeare_dir, *_logged(run, *DDP, f"trainer.max_steps={STEPS}", *TRAINER[world]))
    return _losses(run), _sample_indices(run, shakespeare_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_resume_under_another_number_of_processes(tmp_path, shakespeare_dir, before, after):
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, *DDP, "trainer.max_steps=6", *TRAINER[before])
    run_train(run, shakespeare_dir, *_logged(run, *DDP, f"trainer.max_steps={STEPS}", *TRAINER[after],
                                             f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"))
    losses, samples = _losses(run), _sample_indices(run, shakespeare_dir, tmp_path)
    want_losses, want_samples = _straight_run(tmp_path, shakespeare_dir, after)
    assert sorted(samples) == list(range(6, STEPS))
    assert samples == {s: want_samples[s] for s in range(6, STEPS)}
    assert _loss_steps(run) == list(range(STEPS))  # both segments in the log
    for step in range(STEPS):
        assert losses[step] == pytest.approx(want_losses[step], rel=1e-4), step


# --- two nodes on this machine: torchrun, one process each, over the loopback ------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(run_dir, shakespeare_dir, node_rank: int, port: int, *overrides: str) -> subprocess.Popen:
    """One node of a 2-node run: ``torchrun --nnodes 2 --nproc-per-node 1`` in its own session."""
    env = dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir), ZOO_CACHE_DIR=str(run_dir.parent / "cache"),
               PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--node-rank", str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
           str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", "trainer=ddp_cpu", "trainer.num_nodes=2",
           "trainer.devices=1", *overrides]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _two_nodes(run_dir, shakespeare_dir, *overrides: str) -> None:
    port = _free_port()
    nodes = [_node(run_dir, shakespeare_dir, rank, port, *overrides) for rank in (0, 1)]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    for node, out in zip(nodes, outputs):
        assert node.returncode == 0, out[-5000:]


@pytest.mark.slow
def test_two_nodes_train_and_resume_like_two_processes(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    _two_nodes(run, shakespeare_dir, *DDP, "trainer.max_steps=6")
    _two_nodes(run, shakespeare_dir, *_logged(run, *DDP, f"trainer.max_steps={STEPS}",
                                              f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"))
    want_losses, want_samples = _straight_run(tmp_path, shakespeare_dir, 2)
    losses, samples = _losses(run), _sample_indices(run, shakespeare_dir, tmp_path)
    assert _loss_steps(run) == list(range(STEPS)) and samples == {s: want_samples[s] for s in range(6, STEPS)}
    for step in losses:
        assert losses[step] == pytest.approx(want_losses[step], rel=1e-4), step
    # one run directory, written by global rank 0: no per-rank copies of logs, configs or checkpoints
    names = sorted(p.name for p in run.iterdir())
    assert not [n for n in names if "process_1" in n or "rank" in n], names
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["dies", "hangs"])
def test_a_node_that_dies_or_hangs_stops_the_other(tmp_path, shakespeare_dir, fault):
    run, port = tmp_path / "run", _free_port()
    overrides = _logged(run, *DDP, "trainer.max_steps=100000", "trainer.strategy.timeout.seconds=20")
    nodes = [_node(run, shakespeare_dir, rank, port, *overrides) for rank in (0, 1)]
    log = run.parent / "run.samples.rank0"
    deadline = time.monotonic() + 300
    while not (log.exists() and len(log.read_text().splitlines()) > 40) and time.monotonic() < deadline:
        assert nodes[0].poll() is None and nodes[1].poll() is None, "a node stopped before training"
        time.sleep(1)
    # node 1 dies (its torchrun agent and its worker) or hangs (stopped, its connections left open)
    _signal_tree(nodes[1].pid, signal.SIGKILL if fault == "dies" else signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        out = nodes[0].communicate(timeout=120)[0]
    finally:
        _signal_tree(nodes[0].pid, signal.SIGKILL)
        _signal_tree(nodes[1].pid, signal.SIGKILL)
    assert nodes[0].returncode != 0 and time.monotonic() - stopped < 90
    # gloo names the cause: "Connection closed by peer" / "Read error ...: Connection reset by peer", or,
    # for a node that hangs, the collective's timeout; gloo words it as "Timed out waiting 20000ms
    # for recv operation" or "Application timeout caused pair closure", by where the wait was
    expected = r"by peer" if fault == "dies" else r"Timed out waiting 20000ms|Application timeout caused pair closure"
    assert re.search(expected, out), out[-3000:]


def _signal_tree(pid: int, sig: int) -> None:
    """Signal a process and its descendants (torchrun starts its workers in sessions of their own)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        os.kill(pid, sig)
    except (FileNotFoundError, ProcessLookupError):
        return
    for child in children:
        _signal_tree(int(child), sig)
