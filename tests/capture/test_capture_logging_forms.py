"""More forms of logging inside a captured frame (csrc/capture/vals/logcall.c),
as real model code writes them: a logger reached through an attribute
(`self.logger.info`, `obj.log.warning`), a logging.LoggerAdapter, logging's
module functions on the root logger (`logging.warning(...)`),
`warnings.warn(...)`, and `logger.isEnabledFor(...)` /
`logger.getEffectiveLevel()` guards around a log call. Each test runs the
function eagerly and compiled on the same random inputs and compares the
values and what was logged or warned (message, level, funcName, lineno,
pathname; a warning's message, category, filename, lineno and how many
times it shows under each filter action); what depends on mutable state
(levels, disabled flags, filters) is re-checked on every call."""
import logging
import warnings

import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, break_counts, compiled, entry_tree, reasons

logger = logging.getLogger("wick.tests.capture_logging_forms")
other_logger = logging.getLogger("wick.tests.capture_logging_forms.other")
adapter = logging.LoggerAdapter(logger, {"tag": "adapted"})


class Collect(logging.Handler):
    """Every record as (level, message, funcName, lineno, pathname, tag)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append((record.levelname, record.getMessage(), record.funcName, record.lineno,
                             record.pathname, getattr(record, "tag", None)))


def attach(lg, level=logging.DEBUG):
    h = Collect()
    saved = (lg.level, lg.propagate, lg.disabled)
    lg.addHandler(h)
    lg.setLevel(level)
    lg.propagate = False
    lg.disabled = False

    def restore():
        lg.removeHandler(h)
        lg.setLevel(saved[0])
        lg.propagate, lg.disabled = saved[1], saved[2]
    return h, restore


@pytest.fixture
def handler():
    h, restore = attach(logger)
    yield h
    restore()


@pytest.fixture
def root_handler():
    h, restore = attach(logging.getLogger())
    yield h
    restore()


SHAPES_DTYPES = [((5,), torch.float32), ((3, 7), torch.float64), ((2, 3, 4), torch.float32)]


def inputs(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype) + 0.5


def one_graph_entry(fn):
    es = entry_tree(fn.__code__)
    assert es and all(not e["eager"] and e["graph_count"] == 1 and not e.get("breaks") for e in es), reasons(fn)


def same_records(fn, cf, h, *args, project=list):
    """fn(*args) eagerly, then cf(*args): equal results, and the records the
    compiled call logs are eager's (both through `project`). Returns eager's."""
    h.records.clear()
    expected = fn(*args)
    eager = project(h.records)
    h.records.clear()
    assert_same(cf(*args), expected)
    assert project(h.records) == eager
    return eager


def run_both(fn, h, *extra, calls=2):
    """fn eagerly then compiled on fresh random inputs of several shapes and
    dtypes: equal results, and the records each call logs are eager's."""
    cf = compiled(fn)
    for i, (shape, dtype) in enumerate(SHAPES_DTYPES):
        for c in range(calls):
            x = inputs(shape, dtype, 10 * i + c)
            assert same_records(fn, cf, h, x, *extra)  # equal, and the function logs
    return cf


# ---- a logger reached through an attribute -----------------------------------------------------------------


class LoggingBlock(torch.nn.Module):
    def __init__(self, lg, dim=7):
        super().__init__()
        self.logger = lg
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        y = x.sin() * self.scale[: x.shape[-1]]
        self.logger.info("block saw %d dims", 3)
        return y.exp()


def module_attr_logger(x, block):
    return block(x)


class Holder:
    def __init__(self, lg):
        self.log = lg


holder = Holder(logger)


def instance_attr_logger(x):
    y = x.cos()
    holder.log.warning("through %s", "holder")
    return y * x


@pytest.mark.parametrize("fn", [instance_attr_logger], ids=lambda f: f.__name__)
def test_instance_attribute_logger_is_one_graph(fn, handler):
    C.reset()
    run_both(fn, handler)
    one_graph_entry(fn)


def test_module_attribute_logger_is_one_graph(handler):
    C.reset()
    block = LoggingBlock(logger)
    run_both(module_attr_logger, handler, block)
    one_graph_entry(module_attr_logger)
    (level, msg, func, line, path, _), = handler.records
    code = LoggingBlock.forward.__code__
    assert (level, msg, func, path, line) == ("INFO", "block saw 3 dims", "forward", code.co_filename,
                                               code.co_firstlineno + 2)


def test_module_with_another_logger_logs_to_it(handler):
    """The logger an attribute held at capture is pinned by identity: a
    module holding another logger logs there, as in eager."""
    C.reset()
    other, restore = attach(other_logger)
    try:
        cf = compiled(module_attr_logger)
        for lg, h in ((logger, handler), (other_logger, other), (logger, handler)):
            x = inputs((2, 7), torch.float32, 3)
            block = LoggingBlock(lg)
            handler.records.clear()
            other.records.clear()
            expected = module_attr_logger(x, block)
            eager = (list(handler.records), list(other.records))
            handler.records.clear()
            other.records.clear()
            assert_same(cf(x, block), expected)
            assert (handler.records, other.records) == eager and h.records
    finally:
        restore()
    one_graph_entry(module_attr_logger)


def test_instance_attribute_rebound(handler):
    """holder.log rebound to another logger between calls: the records go
    where eager sends them."""
    C.reset()
    other, restore = attach(other_logger)
    cf = compiled(instance_attr_logger)
    try:
        x = inputs((4,), torch.float64, 1)
        cf(x)
        holder.log = other_logger
        assert_same(cf(x), instance_attr_logger(x))
        assert len(handler.records) == 1 and len(other.records) == 2
        assert other.records[0] == other.records[1]
    finally:
        holder.log = logger
        restore()
    one_graph_entry(instance_attr_logger)


# ---- LoggerAdapter -----------------------------------------------------------------------------------------


def adapter_calls(x):
    y = x.sigmoid()
    adapter.info("adapter %s", "info")
    z = y * x
    adapter.log(logging.WARNING, "adapter level %d", logging.WARNING)
    return z.sum(-1)


class TaggingAdapter(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return "[tagged] " + msg, kwargs


tagging = TaggingAdapter(logger, {"tag": "t"})


def custom_process_adapter(x):
    y = x * 3
    tagging.warning("custom %d", 4)
    return y - x


def test_adapter_is_one_graph(handler):
    C.reset()
    run_both(adapter_calls, handler)
    one_graph_entry(adapter_calls)
    assert all(r[5] == "adapted" for r in handler.records)


def test_adapter_with_its_own_process(handler):
    """An adapter subclass with its own process() is not replayed whole:
    capture runs its methods, and the logger call they reach is deferred;
    the record still names the adapter's caller (findCaller steps over
    logging's frames), as in eager."""
    C.reset()
    run_both(custom_process_adapter, handler)
    assert handler.records[0][1] == "[tagged] custom 4"
    code = custom_process_adapter.__code__
    assert handler.records[0][2:5] == ("custom_process_adapter", code.co_firstlineno + 2, code.co_filename)
    one_graph_entry(custom_process_adapter)


# ---- logging's module functions (the root logger) ---------------------------------------------------------------


def root_functions(x):
    y = x.abs()
    logging.warning("root warning %d", 1)
    logging.info("root info")
    z = y.sqrt()
    logging.debug("root debug %s", "d")
    logging.error("root error")
    logging.log(logging.CRITICAL, "root log %r", (1, 2))
    return z + y


def test_root_functions_are_one_graph(root_handler):
    C.reset()
    run_both(root_functions, root_handler)
    one_graph_entry(root_functions)
    assert [r[0] for r in root_handler.records] == ["WARNING", "INFO", "DEBUG", "ERROR", "CRITICAL"]
    assert {r[2] for r in root_handler.records} == {"root_functions"}


def test_root_level_changed_between_calls(root_handler):
    C.reset()
    cf = compiled(root_functions)
    x = inputs((3, 7), torch.float64, 2)
    for level in (logging.DEBUG, logging.ERROR, logging.INFO):
        logging.getLogger().setLevel(level)
        same_records(root_functions, cf, root_handler, x)
    one_graph_entry(root_functions)


# ---- isEnabledFor / getEffectiveLevel guards ------------------------------------------------------------------


def guarded_debug(x):
    y = x.cos()
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("debugging %d", 5)
        y = y * 2
    return y + x


def effective_level_branch(x):
    y = x.exp()
    if logger.getEffectiveLevel() <= logging.INFO:
        logger.info("verbose path")
        y = y - 1
    return y


def attribute_guard(x, block):
    if block.logger.isEnabledFor(logging.INFO):
        block.logger.info("via the block")
        x = x + 1
    return block(x)


def adapter_guard(x):
    if adapter.isEnabledFor(logging.WARNING):
        x = x * 4
    return x.sin()


def level_changes(lg):
    """Each state the guard must tell apart: the logger's own level, its
    parent's (level NOTSET), its disabled flag, and logging.disable()."""
    parent = logging.getLogger("wick.tests")
    saved = parent.level

    def set_level(level):
        def go():
            lg.setLevel(level)
        return go

    def parent_level(level):
        def go():
            lg.setLevel(logging.NOTSET)
            parent.setLevel(level)
        return go

    def disabled(flag):
        def go():
            lg.setLevel(logging.DEBUG)
            lg.disabled = flag
        return go

    def disable_all(level):
        def go():
            logging.disable(level)
        return go

    steps = [set_level(logging.DEBUG), set_level(logging.WARNING), set_level(logging.INFO), set_level(logging.DEBUG),
             parent_level(logging.DEBUG), parent_level(logging.ERROR), disabled(True), disabled(False),
             disable_all(logging.INFO), disable_all(logging.NOTSET), set_level(logging.DEBUG)]

    def restore():
        parent.setLevel(saved)
        lg.disabled = False
        logging.disable(logging.NOTSET)
    return steps, restore


@pytest.mark.parametrize("fn", [guarded_debug, effective_level_branch, adapter_guard], ids=lambda f: f.__name__)
def test_level_guard_follows_the_logger(fn, handler):
    C.reset()
    cf = compiled(fn)
    steps, restore = level_changes(logger)
    branches = set()
    try:
        for i, step in enumerate(steps):
            step()
            shape, dtype = SHAPES_DTYPES[i % len(SHAPES_DTYPES)]
            x = inputs(shape, dtype, i)
            same_records(fn, cf, handler, x)
            branches.add(logger.isEnabledFor(logging.DEBUG))
    finally:
        restore()
    assert branches == {True, False}
    one_graph_entry(fn)


def test_level_guard_on_an_attribute_logger(handler):
    C.reset()
    cf = compiled(attribute_guard)
    block = LoggingBlock(logger)
    try:
        for i, level in enumerate((logging.DEBUG, logging.ERROR, logging.INFO, logging.WARNING)):
            logger.setLevel(level)
            x = inputs((3, 7), torch.float32, i)
            same_records(attribute_guard, cf, handler, x, block)
    finally:
        logger.setLevel(logging.DEBUG)
    one_graph_entry(attribute_guard)


# ---- warnings.warn ---------------------------------------------------------------------------------------------


class ModelWarning(FutureWarning):
    pass


def warns_mid(x):
    y = x.sin()
    warnings.warn("the old path is deprecated", ModelWarning)
    z = y * 2
    warnings.warn("plain user warning")
    return z + x


def helper_that_warns(y):
    warnings.warn("from the helper", category=DeprecationWarning, stacklevel=1)
    return y.relu()


def inlined_warn(x):
    return helper_that_warns(x - 0.2) * 3


def mutates_then_warns(x, events):
    x.add_(1)
    events.append("before")
    warnings.warn("added one", UserWarning)
    events.append("after")
    return x * 2


def warns_stacklevel_2(x):
    y = x.cos()
    warnings.warn("blame my caller", UserWarning, stacklevel=2)
    return y


def clear_registries(*fns):
    for fn in fns:
        fn.__globals__.pop("__warningregistry__", None)
    warnings.onceregistry.clear() if hasattr(warnings, "onceregistry") else None


def shown(fn, x, action, calls=3):
    """Values and warnings (message, category, filename, lineno) shown over
    `calls` calls of fn under `action` for every warning."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter(action)
        outs = [fn(x.clone()) for _ in range(calls)]
    return outs, [(str(w.message), w.category, w.filename, w.lineno) for w in got]


@pytest.mark.parametrize("action", ["always", "default", "once", "module", "ignore"])
@pytest.mark.parametrize("fn", [warns_mid, inlined_warn], ids=lambda f: f.__name__)
def test_warn_is_one_graph_under_each_filter(fn, action):
    C.reset()
    cf = compiled(fn)
    for i, (shape, dtype) in enumerate(SHAPES_DTYPES):
        x = inputs(shape, dtype, i)
        clear_registries(fn, helper_that_warns)
        expected, eager = shown(fn, x, action)
        clear_registries(fn, helper_that_warns)
        got, compiled_warnings = shown(cf, x, action)
        for g, e in zip(got, expected):
            assert_same(g, e)
        assert compiled_warnings == eager
        assert (len(eager) > 0) == (action != "ignore")
    one_graph_entry(fn)


def test_warn_location_is_the_call_site():
    C.reset()
    clear_registries(inlined_warn, helper_that_warns)
    _, got = shown(compiled(inlined_warn), inputs((4,), torch.float32, 0), "always", calls=1)
    code = helper_that_warns.__code__
    assert got == [("from the helper", DeprecationWarning, code.co_filename, code.co_firstlineno + 1)]
    one_graph_entry(inlined_warn)


def test_warn_category_filter():
    """A filter on the category (a parent class of it) and on the message."""
    C.reset()
    cf = compiled(warns_mid)
    x = inputs((3, 7), torch.float64, 4)
    for setup in (lambda: warnings.filterwarnings("ignore", category=FutureWarning),
                  lambda: warnings.filterwarnings("ignore", message="plain"),
                  lambda: warnings.filterwarnings("always", module="nothing_like_this")):
        results = []
        for run in (warns_mid, cf):
            clear_registries(warns_mid)
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                setup()
                out = [run(x) for _ in range(2)]
            results.append((out, [(str(w.message), w.category, w.lineno) for w in got]))
        (expected, eager), (outs, seen) = results
        assert seen == eager and eager
        for g, e in zip(outs, expected):
            assert_same(g, e)
    one_graph_entry(warns_mid)


def test_warn_as_error_raises_where_eager_does():
    """Under an "error" filter the warning raises at the call: after the
    in-place add and the first append, before the second. An entry made
    under "always" defers the call; under "error" its filter check fails,
    and the call raises where eager's does: the argument, the appends and
    the warnings shown are eager's."""
    C.reset()
    cf = compiled(mutates_then_warns)
    for i, action in enumerate(("always", "error", "always", "error")):
        x = inputs(SHAPES_DTYPES[i % 3][0], SHAPES_DTYPES[i % 3][1], 7 + i)
        xe, xc = x.clone(), x.clone()
        outcomes = []
        for run, arg in ((mutates_then_warns, xe), (cf, xc)):
            clear_registries(mutates_then_warns)
            events = []
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter(action)
                try:
                    out = run(arg, events)
                except UserWarning as e:
                    out = ("raised", str(e))
            outcomes.append((out, events, [str(w.message) for w in got]))
        (expected, eager_events, eager_seen), (out, events, seen) = outcomes
        assert (events, seen) == (eager_events, eager_seen)
        if action == "error":
            assert out == expected == ("raised", "added one") and events == ["before"]
        else:
            assert_same(out, expected)
            assert events == ["before", "after"] and seen == ["added one"]
        assert torch.equal(xc, xe)
    es = C.code_entries(mutates_then_warns.__code__)  # the frame's own entries, not its resume functions
    assert any(not e["eager"] and e["graph_count"] == 1 and not e.get("breaks") for e in es), reasons(
        mutates_then_warns)  # the entry made under "always"
    assert any(e.get("breaks") or e["eager"] for e in es)  # the one under "error"


def test_warn_stacklevel_2_still_breaks_and_is_exact():
    C.reset()
    cf = compiled(warns_stacklevel_2)
    x = inputs((6,), torch.float32, 8)
    clear_registries(warns_stacklevel_2)
    expected, eager = shown(lambda t: warns_stacklevel_2(t), x, "always", calls=1)
    got, seen = shown(lambda t: cf(t), x, "always", calls=1)
    assert_same(got[0], expected[0])
    assert [w[:2] for w in seen] == [w[:2] for w in eager]
    graphs, breaks, eager_entries = break_counts(warns_stacklevel_2)
    assert breaks >= 1, reasons(warns_stacklevel_2)


def debug_a_tensor(x):
    y = x.sin()
    logger.debug("sum is %s", y.sum())
    return y * 2


def test_disabled_call_with_a_tensor_is_one_graph(handler):
    """A tensor argument is not replayable, so the call is captured as
    before: Logger.debug asks isEnabledFor first, a guarded constant now. A
    logger not enabled for DEBUG makes it do nothing (one graph, as in
    eager); enabled, the tensor is formatted (a break), and the records are
    eager's."""
    C.reset()
    cf = compiled(debug_a_tensor)
    try:
        for i, level in enumerate((logging.INFO, logging.INFO, logging.DEBUG, logging.WARNING)):
            logger.setLevel(level)
            shape, dtype = SHAPES_DTYPES[i % 3]
            x = inputs(shape, dtype, i)
            eager = same_records(debug_a_tensor, cf, handler, x, project=lambda rs: [r[:2] for r in rs])
            assert bool(eager) == (level == logging.DEBUG)
    finally:
        logger.setLevel(logging.DEBUG)
    es = C.code_entries(debug_a_tensor.__code__)
    assert any(not e["eager"] and e["graph_count"] == 1 and not e.get("breaks") for e in es), reasons(debug_a_tensor)
    assert any(e.get("breaks") or e["eager"] for e in es)
