# Shared set-up of bin/run, bin/test and bin/bench (sourced, not run): a
# .venv with the pinned requirements (pip runs only when requirements.txt or
# the Python version changed) and the database migrations.
venv_setup() {
    local py
    if [[ ! -x .venv/bin/python ]]; then
        py="$(command -v python3.11 || command -v python3 || true)"
        [[ -n "$py" ]] || { echo "error: python3.11 (or python3) not found" >&2; exit 1; }
        echo "==> creating .venv with $py"
        rm -rf .venv
        "$py" -m venv .venv
    fi
    local want have=""
    want="$( { sha256sum requirements.txt; .venv/bin/python -V; } | sha256sum | cut -d' ' -f1)"
    [[ -f .venv/.requirements.sha256 ]] && have="$(cat .venv/.requirements.sha256)"
    if [[ "$want" != "$have" ]]; then
        echo "==> pip install -r requirements.txt"
        .venv/bin/python -m pip install --disable-pip-version-check -q -r requirements.txt
        echo "$want" > .venv/.requirements.sha256
    fi
    mkdir -p "${QUEUEADMIN_VAR:-var}"
    [[ -n "${DATABASE_PATH:-}" ]] && mkdir -p "$(dirname "$DATABASE_PATH")"
    .venv/bin/python manage.py migrate --noinput -v 0
}
