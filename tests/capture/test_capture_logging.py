"""Logging calls inside a captured frame (csrc/capture/vals/logcall.c):
`logger.warning("%s", 3)`, `.info`, `.log` on a module's logger, and
transformers' `warning_once` (an lru_cache wrapper on logging.Logger) with
plain arguments are kept as side effects that the transformed code makes
for real after the graph, in program order with the frame's other replayed
effects, so the frame stays one graph. Each test runs the function eagerly
and compiled, on the same random inputs, and compares the results and the
log records (message, level, and where logging says the call was made);
what is not replayable (a tensor argument, stacklevel, a side effect of
another kind after the call) still breaks the graph and stays exact."""
import logging

import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, break_counts, compiled, entry_tree, reasons

logger = logging.getLogger("wick.tests.capture_logging")


class Collect(logging.Handler):
    """Every record as (level, message, funcName, lineno, pathname); with
    `into`, the message is also appended to that list (a frame's list
    argument), so the order against the frame's own appends shows."""

    def __init__(self, into=None):
        super().__init__(logging.DEBUG)
        self.records, self.into = [], into

    def emit(self, record):
        self.records.append((record.levelname, record.getMessage(), record.funcName, record.lineno,
                             record.pathname))
        if self.into is not None:
            self.into.append(record.getMessage())


@pytest.fixture
def handler():
    h = Collect()
    logger.addHandler(h)
    old_level, old_propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield h
    logger.removeHandler(h)
    logger.setLevel(old_level)
    logger.propagate = old_propagate


SHAPES_DTYPES = [((5,), torch.float32), ((3, 7), torch.float64), ((2, 3, 4), torch.float32)]


def inputs(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype) + 0.5


def warn_mid(x):
    y = x.sin() * 2
    logger.warning("%s and %s", 3, "three")
    return y.exp() + x


def info_and_log(x):
    y = x.cos()
    logger.info("halfway: %d items", 7)
    z = (y * x).sum(-1)
    logger.log(logging.ERROR, "done with %r", (1, 2.5))
    return z + 1


def helper_that_logs(y):
    logger.debug("in the helper")
    return y.relu()


def inlined_call_logs(x):
    return helper_that_logs(x - 0.1) * 3


def result_used(x):
    r = logger.warning("returns None")
    return x.tanh(), r


def bound_method_called_later(x):
    warn = logger.warning
    y = x.abs().sqrt()
    warn("bound %s", 1.5)
    return y


def through_the_class(x):
    logging.Logger.info(logger, "through the class %d", 2)
    return x.square() - x


def one_graph_entry(fn):
    """Every cache entry of fn (one per shape and dtype) is one graph, without
    a break; no frame runs eagerly."""
    es = entry_tree(fn.__code__)
    assert es and all(not e["eager"] and e["graph_count"] == 1 and not e.get("breaks") for e in es), reasons(fn)


def run_both(fn, handler, calls=3):
    """fn eagerly then compiled, `calls` times each on fresh random inputs of
    several shapes and dtypes: results equal, and the records each call
    logs are eager's."""
    cf = compiled(fn)
    for i, (shape, dtype) in enumerate(SHAPES_DTYPES):
        for c in range(calls):
            x = inputs(shape, dtype, 10 * i + c)
            handler.records.clear()
            expected = fn(x)
            eager_records = list(handler.records)
            handler.records.clear()
            got = cf(x)
            assert_same(got, expected)
            assert handler.records == eager_records
            assert eager_records  # the function logs


@pytest.mark.parametrize("fn", [warn_mid, info_and_log, inlined_call_logs, result_used, bound_method_called_later,
                                through_the_class], ids=lambda f: f.__name__)
def test_logging_call_is_one_graph_and_logs_each_call(fn, handler):
    C.reset()
    run_both(fn, handler)
    one_graph_entry(fn)


def test_record_location_is_the_call_site(handler):
    """logging's findCaller sees the replayed call where eager made it: the
    inlined helper's file, line and name."""
    cf = compiled(inlined_call_logs)
    cf(inputs((4,), torch.float32, 0))
    (level, msg, func, line, path), = handler.records
    code = helper_that_logs.__code__
    assert (level, msg, func, path) == ("DEBUG", "in the helper", "helper_that_logs", code.co_filename)
    assert line == code.co_firstlineno + 1


def appends_around_log(x, events):
    events.append("before")
    y = x * x
    logger.warning("between")
    events.append("after")
    return y - 1


def test_program_order_with_list_appends(handler):
    """The handler appends each message to the same list the frame appends
    to: the replay keeps eager's order."""
    C.reset()
    cf = compiled(appends_around_log)
    for shape, dtype in SHAPES_DTYPES:
        x = inputs(shape, dtype, 1)
        eager_events, got_events = [], []
        handler.into = eager_events
        expected = appends_around_log(x, eager_events)
        handler.into = got_events
        got = cf(x, got_events)
        assert_same(got, expected)
        assert got_events == eager_events == ["before", "between", "after"]
    one_graph_entry(appends_around_log)


def log_then_branch(x, events):
    events.append("start")
    y = x.cos()
    logger.warning("mid %d", 1)
    if y.sum() > x.numel() * 0.8:  # a branch on a tensor: a graph break
        events.append("high")
    else:
        events.append("low")
    return y * 2


def test_log_before_a_graph_break(handler):
    """Effects kept before a break are replayed before the instruction that
    breaks: the record comes between the appends, as in eager."""
    C.reset()
    cf = compiled(log_then_branch)
    seen = set()
    for i, (shape, dtype) in enumerate(SHAPES_DTYPES * 2):
        x = inputs(shape, dtype, i) * (0.2 if i % 2 else 1.0)
        eager_events, got_events = [], []
        handler.into = eager_events
        expected = log_then_branch(x, eager_events)
        handler.into = got_events
        assert_same(cf(x, got_events), expected)
        assert got_events == eager_events and eager_events[:2] == ["start", "mid 1"]
        seen.add(eager_events[2])
    assert seen == {"high", "low"}
    graphs, breaks, eager = break_counts(log_then_branch)
    assert breaks >= 1 and eager == 0, reasons(log_then_branch)


def gen_logs(x):
    def items():
        for k in range(3):
            logger.info("item %d", k)
            yield x * k
    return sum(items())


def test_log_inside_a_generator(handler):
    """A generator runs ahead of its consumer at capture time: one that logs
    is not modelled, and the records still come as in eager."""
    C.reset()
    cf = compiled(gen_logs)
    x = inputs((4,), torch.float32, 5)
    expected = gen_logs(x)
    eager_records = list(handler.records)
    handler.records.clear()
    assert_same(cf(x), expected)
    assert [r[:2] for r in handler.records] == [r[:2] for r in eager_records]


def test_level_changed_between_calls(handler):
    """The call is made for real after each graph: a level raised between
    calls silences it, as in eager."""
    C.reset()
    cf = compiled(warn_mid)
    x = inputs((6,), torch.float32, 2)
    cf(x)
    assert len(handler.records) == 1
    logger.setLevel(logging.ERROR)
    assert_same(cf(x), warn_mid(x))
    assert len(handler.records) == 1
    logger.setLevel(logging.DEBUG)
    cf(x)
    assert len(handler.records) == 2
    one_graph_entry(warn_mid)


def tensor_argument(x):
    y = x.sin()
    logger.warning("sum is %s", y.sum())
    return y * 2


def stacklevel_argument(x):
    y = x.sin()
    logger.warning("from my caller", stacklevel=2)
    return y * 2


class Box:
    pass


def attribute_write_after_log(x, box):
    y = x + 1
    logger.warning("box is %s", "empty")
    box.value = 5
    return y * 3


def attribute_write_between_logs(x, box):
    y = x + 1
    logger.warning("first")
    box.value = 5
    logger.warning("second")
    return y * 3


@pytest.mark.parametrize("fn", [tensor_argument, stacklevel_argument], ids=lambda f: f.__name__)
def test_not_replayable_still_breaks(fn, handler):
    C.reset()
    cf = compiled(fn)
    for i, (shape, dtype) in enumerate(SHAPES_DTYPES):
        x = inputs(shape, dtype, i)
        handler.records.clear()
        expected = fn(x)
        eager_msgs = [r[:2] for r in handler.records]
        handler.records.clear()
        got = cf(x)
        assert_same(got, expected)
        assert [r[:2] for r in handler.records] == eager_msgs
    graphs, breaks, eager = break_counts(fn)
    assert breaks >= 1 and eager == 0, reasons(fn)


def bad_level(x):
    y = x * 4
    logger.log("WARNING", "the level is a str")
    return y


def test_a_call_that_raises_raises_where_eager_does(handler):
    """Logger.log with a level that is no int raises TypeError: not deferred,
    the exception comes from the call, as in eager."""
    C.reset()
    x = inputs((3,), torch.float32, 4)
    with pytest.raises(TypeError, match="level must be an integer"):
        bad_level(x)
    with pytest.raises(TypeError, match="level must be an integer"):
        compiled(bad_level)(x)
    graphs, breaks, eager = break_counts(bad_level)
    assert (breaks, eager) != (0, 0), reasons(bad_level)


class BoxWatcher(logging.Filter):
    """Records what the box held when each record was logged: a handler
    that sees the frame's state."""

    def __init__(self, box):
        super().__init__()
        self.box, self.seen = box, []

    def filter(self, record):
        self.seen.append((record.getMessage(), getattr(self.box, "value", None)))
        return True


@pytest.mark.parametrize("fn", [attribute_write_after_log, attribute_write_between_logs],
                         ids=lambda f: f.__name__)
def test_effect_of_another_kind_after_the_log_breaks(fn, handler):
    """An attribute write after a logging call is replayed before the
    appends: the logging call is not deferred past it, and the result, the
    records, what a filter saw of the object when each record was made, and
    the object are eager's."""
    C.reset()
    cf = compiled(fn)
    for i, (shape, dtype) in enumerate(SHAPES_DTYPES):
        x = inputs(shape, dtype, i)
        seen = []
        for run, box in ((fn, Box()), (cf, Box())):
            watcher = BoxWatcher(box)
            logger.addFilter(watcher)
            handler.records.clear()
            try:
                out = run(x, box)
            finally:
                logger.removeFilter(watcher)
            seen.append((out, list(handler.records), watcher.seen, vars(box)))
        (expected, eager_records, eager_seen, eager_box), (got, records, got_seen, box) = seen
        assert_same(got, expected)
        assert records == eager_records and got_seen == eager_seen and box == eager_box == {"value": 5}
    graphs, breaks, eager = break_counts(fn)
    assert (breaks, eager) != (0, 0), reasons(fn)


transformers = pytest.importorskip("transformers")


def warn_once_mid(x):
    y = x.sigmoid()
    logger.warning_once("wick test: warned once")
    logger.warning_advice("wick test: advice %d", 2)
    return y + x


def test_transformers_warning_once(handler, monkeypatch):
    """warning_once logs its message once across calls (its lru_cache, called
    for real by each replay); warning_advice each time."""
    monkeypatch.delenv("TRANSFORMERS_NO_ADVISORY_WARNINGS", raising=False)
    from transformers.utils import logging as tlog

    C.reset()
    tlog.warning_once.cache_clear()
    for _ in range(3):
        expected = warn_once_mid(inputs((5,), torch.float32, 3))
    eager_msgs = [r[1] for r in handler.records]
    assert eager_msgs == ["wick test: warned once"] + ["wick test: advice 2"] * 3
    handler.records.clear()
    tlog.warning_once.cache_clear()
    cf = compiled(warn_once_mid)
    for _ in range(3):
        got = cf(inputs((5,), torch.float32, 3))
        assert_same(got, expected)
    assert [r[1] for r in handler.records] == eager_msgs
    one_graph_entry(warn_once_mid)
