# Shared set-up of bin/run, bin/test and bin/bench (sourced, not run): a
# .venv with the pinned requirements (pip runs only when the requirements
# files or the Python version changed). `venv_setup` installs requirements.txt
# (the standalone service's tested lock); `venv_setup requirements-test.txt`
# adds the test and benchmark tools.
venv_setup() {
    local py reqs="${1:-requirements.txt}"
    if [[ ! -x .venv/bin/python ]]; then
        py="$(command -v python3.11 || command -v python3 || true)"
        [[ -n "$py" ]] || { echo "error: python3.11 (or python3) not found" >&2; exit 1; }
        echo "==> creating .venv with $py"
        rm -rf .venv
        "$py" -m venv .venv
    fi
    local want have=""
    want="$( { sha256sum requirements*.txt; echo "$reqs"; .venv/bin/python -V; } | sha256sum | cut -d' ' -f1)"
    [[ -f .venv/.requirements.sha256 ]] && have="$(cat .venv/.requirements.sha256)"
    if [[ "$want" != "$have" ]]; then
        echo "==> pip install -r $reqs"
        .venv/bin/python -m pip install --disable-pip-version-check -q -r "$reqs"
        echo "$want" > .venv/.requirements.sha256
    fi
    mkdir -p "${QUEUEADMIN_VAR:-var}"
    chmod 700 "${QUEUEADMIN_VAR:-var}"
}

# A second virtualenv, .venv-newest, on the newest Python here (3.13 or 3.12)
# with the newest releases of everything within pyproject.toml's ranges
# (Django 6.x, redis-py 8.x, ...): bin/test's last pass catches a new major
# version before users do. Refreshed when pyproject.toml changes, or daily.
newest_python() {
    local p
    for p in python3.13 python3.12 ~/.pyenv/versions/3.13*/bin/python3.13 ~/.pyenv/versions/3.12*/bin/python3.12; do
        if "$p" -c 'import venv' >/dev/null 2>&1; then command -v "$p" || echo "$p"; return 0; fi
    done
    return 1
}

venv_newest() {
    local py want have=""
    py="$(newest_python)" || { echo "error: no python3.13 or python3.12 for the newest-releases pass" >&2; exit 1; }
    if [[ ! -x .venv-newest/bin/python ]] || ! .venv-newest/bin/python -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
        echo "==> creating .venv-newest with $py"
        rm -rf .venv-newest
        "$py" -m venv .venv-newest
    fi
    want="$( { sha256sum pyproject.toml; date +%F; .venv-newest/bin/python -V; } | sha256sum | cut -d' ' -f1)"
    [[ -f .venv-newest/.stamp ]] && have="$(cat .venv-newest/.stamp)"
    if [[ "$want" != "$have" ]]; then
        echo "==> pip install --upgrade: the newest releases within pyproject.toml's ranges"
        .venv/bin/python bin/_deps.py standalone hiredis test > .venv-newest/requirements.txt
        .venv-newest/bin/python -m pip install --disable-pip-version-check -q --upgrade -r .venv-newest/requirements.txt
        echo "$want" > .venv-newest/.stamp
    fi
}
