#!/usr/bin/env bash
# One entry point for the two set-up commands of the README:
#   bash tools/dev.sh demo   install what the demo needs, then run it (starts its own broker)
#   bash tools/dev.sh test   install what the tests need, then run the whole suite
# Everything is installed into .venv/ beside this checkout, so a fresh machine
# with Python 3.9+ and gcc needs nothing else. Extra arguments go to the command.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${KIO_VENV:-.venv}

ensure_debian_packages() {
    # Debian packages the project needs (libkrb5-dev is the only one pip needs:
    # the gssapi binding builds against it). Non-interactive: krb5-config would
    # otherwise ask for a default realm.
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

ensure_stunnel() {
    # The TLS tests put Debian's stunnel4 in front of the (plaintext) test broker.
    command -v stunnel4 >/dev/null 2>&1 || command -v stunnel >/dev/null 2>&1 || ensure_debian_packages stunnel4
    command -v openssl >/dev/null 2>&1 || ensure_debian_packages openssl      # the tests make their certificates
}

ensure_java() {
    # PySpark (the spark extra) and the Apache Kafka broker of the test suite run
    # on a JVM: Java 17 from Debian if none is there. The telemetry tests compile
    # a broker plugin (tests/telemetry_sink), so the JDK's javac too.
    command -v java >/dev/null 2>&1 || ensure_debian_packages openjdk-17-jre-headless
    command -v javac >/dev/null 2>&1 || ensure_debian_packages openjdk-17-jdk-headless
}

ensure_maven() {
    # The suite's Apache Kafka broker (kio/testing/kafka_broker.py) is fetched from Maven
    # Central with mvn into ~/.m2 and ~/.cache/kio/kafka on first use.
    command -v mvn >/dev/null 2>&1 || ensure_debian_packages maven
}

ensure_kerberos() {
    # SASL GSSAPI: the gssapi binding (test extra) compiles against MIT krb5's
    # headers, and the tests run their own KDC (krb5kdc, kdb5_util,
    # kadmin.local) and use kinit for librdkafka.
    ensure_debian_packages libkrb5-dev krb5-kdc krb5-admin-server krb5-user
}

ensure_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel Cython
}

install_project() {
    # Editable install: compiles kproto's Cython modules in place. The compat
    # mode puts the checkout itself on sys.path (a .pth line) instead of an
    # import hook, so type checkers (mypy, pyright) find kio and kproto in a
    # user's program too; the default mode's hook is invisible to them.
    # (setuptools calls that mode transitional and warns at length: the
    # output shows only when the install fails.)
    local out
    if ! out=$("$VENV/bin/python" -m pip install -q -e ".[$1]" --config-settings editable_mode=compat 2>&1); then
        printf '%s\n' "$out" >&2
        return 1
    fi
}

cmd=${1:-}
shift || true
case "$cmd" in
    demo)
        ensure_venv
        install_project "broker,compression"
        exec "$VENV/bin/python" -m kio demo "$@"
        ;;
    test)
        ensure_java
        ensure_maven
        ensure_stunnel
        ensure_kerberos
        ensure_venv
        install_project "test,spark,connect,docs"   # docs: tests/test_docs.py builds the site
        # pytest exits 5 when it collects no test: that fails this command too.
        exec "$VENV/bin/python" -m pytest "$@"
        ;;
    *)
        echo "usage: bash tools/dev.sh demo|test [args...]" >&2
        exit 2
        ;;
esac
