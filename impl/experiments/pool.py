"""Independent jobs in worker processes or on a Ray cluster, each result handed back as it
finishes. What `unsee audit --workers` and `--ray` run episodes on."""

from __future__ import annotations


def in_processes(job, jobs, workers: int, done, initializer=None, initargs=()) -> None:
    """Run job(j) for each of `jobs` in `workers` spawned processes (each first runs
    initializer(*initargs)); done(index, result) as each finishes. Stopped (Ctrl-C, SIGTERM) or
    failed, it stops every worker before it re-raises."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    before = {p.pid for p in multiprocessing.active_children()}
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn"),
                             initializer=initializer, initargs=initargs) as pool:
        futures = {pool.submit(job, j): i for i, j in enumerate(jobs)}
        try:
            for f in as_completed(futures):
                done(futures[f], f.result())
        except BaseException:  # stopped (Ctrl-C, SIGTERM) or failed: no episode goes on running unseen
            stop_workers(pool, before)
            raise


def stop_workers(pool, before=frozenset()) -> None:
    """Terminate every worker of `pool` and wait for it; one still alive after 10 s (a busy
    machine), or started meanwhile, is killed. Last, any child process the pool started that is
    not among `before` (the pids alive before the pool) is killed and reaped: on a loaded machine
    a worker the pool was still starting is in none of its lists yet. A worker is known by the
    pool's call queue among its arguments (where the executor does not expose it: by its start
    method's process class). Other children are left alone, also when a stopped pool is stopped
    again."""
    import multiprocessing

    # the executor's private attributes (CPython's concurrent.futures; they differ by Python version)
    queue = getattr(pool, "_call_queue", None)
    kind = getattr(getattr(pool, "_mp_context", None), "Process", None)
    shut = queue is None and hasattr(pool, "_call_queue")  # stopped before: its workers went with it

    def ours(proc) -> bool:
        if queue is not None:
            return any(a is queue for a in getattr(proc, "_args", ()))  # multiprocessing.Process, private
        return not shut and (kind is None or type(proc) is kind)
    for attempt in range(3):
        procs = [p for p in list((getattr(pool, "_processes", None) or {}).values()) if p.is_alive()]  # private
        if not procs:
            break
        for proc in procs:
            proc.terminate() if attempt == 0 else proc.kill()
        for proc in procs:
            _wait_dead(proc)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in multiprocessing.active_children():
        if proc.pid not in before and ours(proc):
            proc.kill()
            _wait_dead(proc)


def _wait_dead(proc, timeout: float = 10.0) -> None:
    """Join `proc` until it reads as dead. The executor's own thread joins its workers too: when
    it reaps one first, this thread's `waitpid` fails and `is_alive()` reads True until that
    thread records the exit code, so `join` alone can return with the worker still "alive"."""
    import time

    deadline = time.monotonic() + timeout
    proc.join(timeout=timeout)
    while proc.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)


def on_ray(job, jobs, address: str, done) -> None:
    """Run job(j) for each of `jobs` as tasks on the Ray cluster at `address` ("local" starts one
    here); done(index, result) as each finishes."""
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("--ray needs Ray: run `bash scripts/setup.sh --tests` or, in the clone, "
                          "`.venv/bin/pip install -e '.[ray]'`") from e
    started = not ray.is_initialized()
    if started:  # "local": start a cluster on this machine; otherwise connect ("auto", "ray://host:port", ...)
        ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1)(job)
        refs = {task.remote(j): i for i, j in enumerate(jobs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done(refs[ready[0]], ray.get(ready[0]))
    finally:
        if started:
            ray.shutdown()
