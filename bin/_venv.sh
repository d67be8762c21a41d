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
