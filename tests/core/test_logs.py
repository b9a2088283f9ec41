import logging

import pytest

from ember.core import get_logger, logs, set_logs


@pytest.fixture(autouse=True)
def _restore_levels():
    yield
    set_logs(all=None)


def test_parse_spec_levels():
    levels = logs.parse_spec("+capture, schedule,-perf_hints")
    assert levels == {"capture": logging.DEBUG, "schedule": logging.INFO,
                      "perf_hints": logging.CRITICAL + 1}


def test_all_covers_every_component():
    levels = logs.parse_spec("+all")
    assert set(levels) == set(logs.known_components())
    assert set(levels.values()) == {logging.DEBUG}


def test_unknown_component_lists_known_ones():
    with pytest.raises(ValueError, match="known components: .*capture"):
        logs.parse_spec("captur")
    with pytest.raises(ValueError, match="unknown log component 'nope'"):
        get_logger("nope")
    with pytest.raises(ValueError, match="unknown log component"):
        set_logs(nope=True)


def test_env_configures_levels():
    logs.configure_from_env({"EMBER_LOGS": "+aot,output_code"})
    assert get_logger("aot").level == logging.DEBUG
    assert get_logger("output_code").level == logging.INFO
    assert get_logger("schedule").level == logging.WARNING


def test_set_logs_from_code(capsys):
    log = get_logger("schedule")
    log.info("hidden")
    set_logs(schedule=True)
    log.info("shown fusion")
    set_logs(schedule="off")
    log.error("silenced")
    err = capsys.readouterr().err
    assert "shown fusion" in err and "[ember.schedule]" in err
    assert "hidden" not in err and "silenced" not in err


def test_bad_level_value():
    with pytest.raises(ValueError, match="log level"):
        set_logs(capture="loud")


def test_register_component():
    logs.register_component("my_pkg", "a user package")
    assert get_logger("my_pkg").name == "ember.my_pkg"
    with pytest.raises(ValueError, match="identifier"):
        logs.register_component("not valid", "x")


def test_all_none_restores_defaults():
    set_logs(capture=logging.DEBUG, schedule=True)
    set_logs(all=None)
    assert get_logger("capture").level == logging.WARNING
    assert get_logger("schedule").level == logging.WARNING
    set_logs(all=True, schedule=False)
    assert get_logger("aot").level == logging.INFO
    assert get_logger("schedule").level == logging.WARNING
