"""The strict Content-Security-Policy in a real browser: the behaviour that
used inline handlers (dismissing messages, the confirm dialog's Back button,
a click beside it, closing it after the request) works from static/queueadmin/app.js,
and Chromium reports no violation."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__csp.push(e.violatedDirective + ' ' + (e.sample || '') + ' ' + e.sourceFile + ':' + e.lineNumber);
});
"""


def test_dialog_and_messages_work_without_inline_handlers(page, submit_many):
    page.context.add_init_script(WATCH)
    (rid,) = submit_many([{"queue": "default", "processor": "echo", "items": ["a", "b"]}])
    response = page.goto(f"/requests/{rid}/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy

    def open_dialog():
        page.click("button:has-text('Cancel request…')")
        page.wait_for_selector("#dialog-slot .modal")

    open_dialog()
    page.click(".modal button:has-text('Back')")
    page.wait_for_selector("#dialog-slot .modal", state="detached")
    open_dialog()
    page.click(".modal-backdrop", position={"x": 5, "y": 5})  # beside the dialog
    page.wait_for_selector("#dialog-slot .modal", state="detached")
    open_dialog()
    page.click(".modal h2")  # inside the dialog: it stays
    assert page.locator("#dialog-slot .modal").count() == 1
    page.click(".modal button[type=submit]")
    page.wait_for_selector(".msg-success")
    page.wait_for_selector("#dialog-slot .modal", state="detached")  # closed after the request
    assert page.inner_text("#state") == "cancelled"
    page.click(".msg-success .msg-close")
    page.wait_for_selector(".msg-success", state="detached")
    assert page.evaluate("window.__csp") == []
    assert not page.errors, page.errors
