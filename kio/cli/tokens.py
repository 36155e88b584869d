"""``kio delegation-tokens create|renew|expire|describe``: what
kafka-delegation-tokens does (``--create``, ``--renew``, ``--expire``,
``--describe``), on kio.Admin.

The connection must authenticate with the owner's own credentials (SASL or
mutual TLS, given with ``--property``): the broker refuses token requests
from a connection that authenticated with a token.

Output, tab-separated for scripts: ``create`` and ``describe`` print one line
per token - token id, HMAC (base64: the SCRAM password of token
authentication), owner, requester, renewers (comma-separated), issue, expiry
and max timestamps (UTC, ISO 8601); ``renew`` and ``expire`` print the new
expiry timestamp."""
from __future__ import annotations

import datetime

from kio.cli.admin import _admin
from kio.cli.common import EXIT_OK, UsageError


def add_parsers(sub, common):
    tokens = sub.add_parser("delegation-tokens", help="create, renew, expire and describe delegation tokens "
                                                      "(as kafka-delegation-tokens)")
    tsub = tokens.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("create", parents=[common])
    p.add_argument("--owner-principal", help="the token's owner, e.g. User:alice (default: the caller)")
    p.add_argument("--renewer-principal", action="append", default=[], help="who may renew it (repeatable)")
    p.add_argument("--max-life-time-period", type=int, default=-1, metavar="MS",
                   help="the token's longest life in ms (default: the broker's delegation.token.max.lifetime.ms)")
    p.set_defaults(func=tokens_create)
    for action, func, period, doc in (
            ("renew", tokens_renew, "--renew-time-period", "how long from now (default: the broker's "
                                                            "delegation.token.expiry.time.ms)"),
            ("expire", tokens_expire, "--expiry-time-period", "how long from now (default -1: at once)")):
        p = tsub.add_parser(action, parents=[common])
        p.add_argument("--hmac", required=True, help="the token's HMAC, base64 (as create prints it)")
        p.add_argument(period, type=int, default=-1, metavar="MS", dest="period", help=doc)
        p.set_defaults(func=func)
    p = tsub.add_parser("describe", parents=[common])
    p.add_argument("--owner-principal", action="append", help="repeatable; default: every token the caller "
                                                              "may see")
    p.set_defaults(func=tokens_describe)


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


def _print_tokens(tokens):
    for t in tokens:
        i = t.token_info
        print("\t".join((i.token_id, t.hmac_base64, i.owner, i.token_requester or "", ",".join(i.renewers),
                         _when(i.issue_timestamp), _when(i.expiry_timestamp), _when(i.max_timestamp))))


def _checked(call):
    """``call()``, a bad principal or HMAC made a usage error (exit 2)."""
    try:
        return call()
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None


def tokens_create(args) -> int:
    with _admin(args) as admin:
        token = _checked(lambda: admin.create_delegation_token(args.owner_principal, args.renewer_principal,
                                                               args.max_life_time_period))
    _print_tokens([token])
    return EXIT_OK


def tokens_renew(args) -> int:
    with _admin(args) as admin:
        print(_when(_checked(lambda: admin.renew_delegation_token(args.hmac, args.period))))
    return EXIT_OK


def tokens_expire(args) -> int:
    with _admin(args) as admin:
        print(_when(_checked(lambda: admin.expire_delegation_token(args.hmac, args.period))))
    return EXIT_OK


def tokens_describe(args) -> int:
    with _admin(args) as admin:
        _print_tokens(_checked(lambda: admin.describe_delegation_token(args.owner_principal)))
    return EXIT_OK
