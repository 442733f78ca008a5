"""Log formats chosen by the CLI (common/logs.py)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from sandbox_egress.common.logs import announce, log_handler


def test_text_is_prefix_and_message() -> None:
    stream = io.StringIO()
    log_handler("test.logs.text", "text", stream, "egress-proxy")
    logging.getLogger("test.logs.text").warning("reload refused: %s", "a.yaml: bad")
    assert stream.getvalue() == "egress-proxy: reload refused: a.yaml: bad\n"


def test_json_is_one_document_per_record() -> None:
    stream = io.StringIO()
    log_handler("test.logs.json", "json", stream, "egress-proxy")
    logger = logging.getLogger("test.logs.json")
    logger.info("ready")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("policy error")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first.pop("time").endswith("Z")
    assert first == {"level": "info", "logger": "test.logs.json", "message": "ready"}
    assert (second["level"], second["message"]) == ("error", "policy error")
    assert second["exception"].endswith("RuntimeError: boom")


def test_a_second_handler_replaces_the_first() -> None:
    first, second = io.StringIO(), io.StringIO()
    log_handler("test.logs.twice", "text", first, "p")
    log_handler("test.logs.twice", "text", second, "p")
    logging.getLogger("test.logs.twice").info("once")
    assert (first.getvalue(), second.getvalue()) == ("", "p: once\n")


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        log_handler("test.logs.bad", "xml", io.StringIO(), "p")


def test_announce_ignores_the_level() -> None:
    stream = io.StringIO()
    announce("text", stream, "egress-proxy", "egress", "listening on 127.0.0.1:8080")
    announce("json", stream, "egress-proxy", "egress", "ready")
    text, document = stream.getvalue().splitlines()
    assert text == "egress-proxy: listening on 127.0.0.1:8080"
    assert json.loads(document)["message"] == "ready"
