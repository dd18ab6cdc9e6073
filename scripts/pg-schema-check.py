#!/usr/bin/env python3
"""Compares a PostgreSQL database's schema with the SQLite schema the server's migrations build.

    python3 scripts/pg-schema-check.py postgres://postgres@127.0.0.1:PORT/DB

It reads the SQLite migrations from server/src/db/migrations.rs (`MIGRATIONS`), applies them to
an in-memory SQLite database, and checks that the PostgreSQL database (reached with `psql`) has
the same tables, and for each table:

- the same columns in the same order, each with the translated type (INTEGER -> bigint,
  TEXT -> text with collation "C", BLOB -> bytea, REAL -> double precision), the same
  nullability and the same default;
- the same primary key, UNIQUE constraints, foreign keys (columns, referenced table and
  columns, ON DELETE action) and CHECK constraints;
- the same indexes, by name: unique or not, columns and their order (DESC), partial predicate.

Extra PostgreSQL columns are allowed only where they stand in for SQLite's implicit rowid (see
ROWID_STAND_INS, and server/src/db/postgres/schema.sql); extra tables only for the bookkeeping the
Rust code owns (--ignore-table, default `seed_agents_schema`). Exits 1 on any difference, 2 when it
cannot run. Standard library and the `psql` client only.
"""

import argparse
import os
import re
import sqlite3
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MIGRATIONS = os.path.join(HERE, "..", "server", "src", "db", "migrations.rs")

# SQLite declared type -> (PostgreSQL information_schema data_type, collation or None).
TYPES = {
    "INTEGER": ("bigint", None),
    "TEXT": ("text", "C"),
    "BLOB": ("bytea", None),
    "REAL": ("double precision", None),
}

# Columns PostgreSQL has in place of SQLite's implicit rowid: table -> column (an identity).
ROWID_STAND_INS = {"secrets": "rowid"}

ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}

FIELD = "\x1f"


def fail(message):
    print(f"pg-schema-check: {message}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# The SQLite side.


def rust_string_literals(text):
    """The string literals of a Rust source fragment, unescaped (raw and plain strings)."""
    literals = []
    pattern = re.compile(r'r(#*)"(.*?)"\1|"((?:[^"\\]|\\.)*)"', re.S)
    position = 0
    while True:
        match = pattern.search(text, position)
        if not match:
            return literals
        # Skip literals inside line comments.
        line_start = text.rfind("\n", 0, match.start()) + 1
        if "//" in text[line_start : match.start()]:
            position = text.find("\n", match.start())
            if position < 0:
                return literals
            continue
        if match.group(2) is not None:
            literals.append(match.group(2))
        else:
            plain = match.group(3)
            plain = re.sub(r"\\\n\s*", "", plain)
            plain = plain.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
            literals.append(plain)
        position = match.end()


def read_migrations(path):
    source = open(path, encoding="utf-8").read()
    start = source.find("const MIGRATIONS")
    if start < 0:
        fail(f"{path} has no `const MIGRATIONS`")
    start = source.index("= &[", start) + len("= &[")
    # The array ends at the first `];` at the start of a line.
    end = re.search(r"^\];", source[start:], re.M)
    if not end:
        fail(f"the MIGRATIONS array in {path} has no end")
    migrations = rust_string_literals(source[start : start + end.start()])
    if not migrations:
        fail(f"no migrations found in {path}")
    return migrations


def split_top_level(text, separator=","):
    parts, depth, current, quote = [], 0, [], False
    for char in text:
        if char == "'":
            quote = not quote
        elif not quote and char == "(":
            depth += 1
        elif not quote and char == ")":
            depth -= 1
        if char == separator and depth == 0 and not quote:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def balanced(text, open_index):
    """The text inside the parenthesis opening at open_index."""
    depth, quote = 0, False
    for index in range(open_index, len(text)):
        char = text[index]
        if char == "'":
            quote = not quote
        elif not quote and char == "(":
            depth += 1
        elif not quote and char == ")":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
    raise ValueError("unbalanced parentheses")


def sqlite_checks(create_sql):
    """The CHECK expressions of a CREATE TABLE statement (column and table constraints)."""
    body = balanced(create_sql, create_sql.index("("))
    checks = []
    for match in re.finditer(r"\bCHECK\s*\(", body, re.I):
        checks.append(balanced(body, match.end() - 1))
    return checks


def sqlite_schema(migrations):
    conn = sqlite3.connect(":memory:")
    for sql in migrations:
        conn.executescript(sql)
    schema = {}
    table_list = {row[1]: row for row in conn.execute("PRAGMA table_list") if row[0] == "main"}
    for (name, sql) in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ):
        _, _, kind, _, without_rowid, strict = table_list[name]
        if kind != "table":
            continue
        columns = []
        primary = []
        for cid, column, declared, notnull, default, pk in conn.execute(f'PRAGMA table_info("{name}")'):
            if pk:
                primary.append((pk, column))
            # STRICT and WITHOUT ROWID tables refuse NULL in primary key columns.
            not_null = bool(notnull) or (bool(pk) and (strict or without_rowid))
            columns.append({"name": column, "type": declared.upper(), "not_null": not_null, "default": default})
        foreign = set()
        rows = list(conn.execute(f'PRAGMA foreign_key_list("{name}")'))
        for fk_id in sorted({row[0] for row in rows}):
            parts = sorted((row for row in rows if row[0] == fk_id), key=lambda row: row[1])
            target = parts[0][2]
            target_columns = []
            for row in parts:
                if row[4] is None:  # REFERENCES t with no columns: t's primary key
                    target_columns = [
                        r[1] for r in sorted(conn.execute(f'PRAGMA table_info("{target}")'), key=lambda r: r[5]) if r[5]
                    ]
                    break
                target_columns.append(row[4])
            foreign.add((tuple(row[3] for row in parts), target, tuple(target_columns), parts[0][6].upper()))
        unique = set()
        indexes = {}
        for _, index, is_unique, origin, partial in conn.execute(f'PRAGMA index_list("{name}")'):
            keys = [row for row in conn.execute(f'PRAGMA index_xinfo("{index}")') if row[5]]
            cols = tuple(row[2] + (" DESC" if row[3] else "") for row in keys)
            if origin == "u":
                unique.add(tuple(row[2] for row in keys))
            elif origin == "c":
                (index_sql,) = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (index,)
                ).fetchone()
                where = None
                if partial:
                    where = re.split(r"\bWHERE\b", index_sql, maxsplit=1, flags=re.I)[1]
                indexes[index] = {"unique": bool(is_unique), "columns": cols, "where": where}
        schema[name] = {
            "columns": columns,
            "primary": tuple(column for _, column in sorted(primary)),
            "unique": unique,
            "foreign": foreign,
            "checks": sqlite_checks(sql),
            "indexes": indexes,
        }
    triggers = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('trigger', 'view')")]
    return schema, triggers


# ---------------------------------------------------------------------------------------------
# The PostgreSQL side.


def psql(url, query):
    try:
        done = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-F", FIELD, "-v", "ON_ERROR_STOP=1", "-d", url, "-c", query],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        fail("psql is not installed (Debian package postgresql-client)")
    if done.returncode != 0:
        fail(f"psql failed: {done.stderr.strip()}")
    return [line.split(FIELD) for line in done.stdout.splitlines() if line]


def pg_array(text):
    text = text.strip("{}")
    return tuple(item.strip('"') for item in text.split(",")) if text else ()


def pg_schema(url):
    schema = {}
    for (name,) in psql(
        url,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') ORDER BY 1",
    ):
        schema[name] = {"columns": [], "primary": (), "unique": set(), "foreign": set(), "checks": [], "indexes": {}}
    for table, column, data_type, nullable, default, collation, identity in psql(
        url,
        "SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, ''), "
        "coalesce(collation_name, ''), is_identity FROM information_schema.columns "
        "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
    ):
        if table in schema:
            schema[table]["columns"].append(
                {
                    "name": column,
                    "type": data_type,
                    "collation": collation or None,
                    "not_null": nullable == "NO",
                    "default": default or None,
                    "identity": identity == "YES",
                }
            )
    constraints = psql(
        url,
        "SELECT c.conrelid::regclass::text, c.contype, "
        "array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) "
        "      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i), "
        "coalesce(c.confrelid::regclass::text, ''), "
        "array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i) "
        "      JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i), "
        "c.confdeltype, pg_get_constraintdef(c.oid) "
        "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
        "WHERE n.nspname = current_schema() AND c.contype IN ('p', 'u', 'f', 'c')",
    )
    for table, kind, columns, target, target_columns, on_delete, definition in constraints:
        if table not in schema:
            continue
        entry = schema[table]
        if kind == "p":
            entry["primary"] = pg_array(columns)
        elif kind == "u":
            entry["unique"].add(pg_array(columns))
        elif kind == "f":
            entry["foreign"].add((pg_array(columns), target, pg_array(target_columns), ON_DELETE[on_delete]))
        elif kind == "c":
            entry["checks"].append(re.sub(r"^CHECK\s*", "", definition))
    for table, index, is_unique, definition in psql(
        url,
        "SELECT t.relname, i.relname, x.indisunique, pg_get_indexdef(x.indexrelid) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = current_schema() "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)",
    ):
        if table not in schema:
            continue
        match = re.search(r" USING \w+ \((.*?)\)(?: WHERE (.*))?$", definition)
        if not match:
            fail(f"cannot read the definition of index {index}: {definition}")
        columns = tuple(re.sub(r'"', "", column) for column in split_top_level(match.group(1)))
        where = match.group(2)
        schema[table]["indexes"][index] = {"unique": is_unique == "t", "columns": columns, "where": where}
    return schema


# ---------------------------------------------------------------------------------------------
# Comparing.


def expression_tokens(expression):
    """An SQL expression as tokens, without grouping parentheses, casts or case."""
    text = re.sub(r"= ANY \(ARRAY\[(.*?)\]\)", r"IN (\1)", expression)
    text = re.sub(r"::[a-z ]+(\[\])?", "", text)
    tokens = re.findall(r"'(?:[^']|'')*'|[A-Za-z_][A-Za-z0-9_]*|\d+|>=|<=|<>|!=|[=<>,]", text)
    return [token if token.startswith("'") else token.lower() for token in tokens]


def normalize_default(value):
    if value is None:
        return None
    value = re.sub(r"::[a-z ]+$", "", value.strip())
    while value.startswith("(") and value.endswith(")"):
        value = value[1:-1]
    return value


def compare(sqlite, postgres, ignored):
    problems = []
    counted = {"tables": 0, "columns": 0, "indexes": 0, "foreign keys": 0, "checks": 0, "unique": 0}
    for table in sorted(set(postgres) - set(sqlite) - set(ignored)):
        problems.append(f"table {table}: in PostgreSQL only")
    for table in sorted(sqlite):
        if table not in postgres:
            problems.append(f"table {table}: missing in PostgreSQL")
            continue
        counted["tables"] += 1
        want, have = sqlite[table], postgres[table]
        have_columns = list(have["columns"])
        stand_in = ROWID_STAND_INS.get(table)
        if stand_in:
            extra = [column for column in have_columns if column["name"] == stand_in]
            if not extra:
                problems.append(f"{table}.{stand_in}: missing (stands in for SQLite's rowid)")
            elif not (extra[0]["type"] == "bigint" and extra[0]["identity"] and extra[0]["not_null"]):
                problems.append(f"{table}.{stand_in}: must be BIGINT GENERATED BY DEFAULT AS IDENTITY")
            have_columns = [column for column in have_columns if column["name"] != stand_in]
        want_names = [column["name"] for column in want["columns"]]
        have_names = [column["name"] for column in have_columns]
        for column in want_names:
            if column not in have_names:
                problems.append(f"{table}.{column}: missing in PostgreSQL")
        for column in have_names:
            if column not in want_names:
                problems.append(f"{table}.{column}: in PostgreSQL only")
        shared = [column for column in want_names if column in have_names]
        if shared != [column for column in have_names if column in want_names]:
            problems.append(f"{table}: column order {have_names} in PostgreSQL, {want_names} in SQLite")
        have_by_name = {column["name"]: column for column in have_columns}
        for column in want["columns"]:
            other = have_by_name.get(column["name"])
            if other is None:
                continue
            counted["columns"] += 1
            where = f"{table}.{column['name']}"
            if column["type"] not in TYPES:
                problems.append(f"{where}: SQLite type {column['type']!r} has no translation in this check")
                continue
            data_type, collation = TYPES[column["type"]]
            if other["type"] != data_type:
                problems.append(f"{where}: type {other['type']} in PostgreSQL, want {data_type} ({column['type']})")
            if collation and other["collation"] != collation:
                problems.append(f"{where}: collation {other['collation']} in PostgreSQL, want {collation}")
            if other["not_null"] != column["not_null"]:
                problems.append(
                    f"{where}: {'NOT NULL' if other['not_null'] else 'nullable'} in PostgreSQL, "
                    f"{'NOT NULL' if column['not_null'] else 'nullable'} in SQLite"
                )
            if normalize_default(other["default"]) != normalize_default(column["default"]):
                problems.append(f"{where}: default {other['default']!r} in PostgreSQL, {column['default']!r} in SQLite")
        if want["primary"] != have["primary"]:
            problems.append(f"{table}: primary key {have['primary']} in PostgreSQL, {want['primary']} in SQLite")
        if want["unique"] != have["unique"]:
            problems.append(f"{table}: UNIQUE {sorted(have['unique'])} in PostgreSQL, {sorted(want['unique'])} in SQLite")
        counted["unique"] += len(want["unique"])
        if want["foreign"] != have["foreign"]:
            for fk in sorted(want["foreign"] - have["foreign"]):
                problems.append(f"{table}: foreign key {fk} missing in PostgreSQL")
            for fk in sorted(have["foreign"] - want["foreign"]):
                problems.append(f"{table}: foreign key {fk} in PostgreSQL only")
        counted["foreign keys"] += len(want["foreign"])
        want_checks = sorted(expression_tokens(check) for check in want["checks"])
        have_checks = sorted(expression_tokens(check) for check in have["checks"])
        if want_checks != have_checks:
            problems.append(f"{table}: CHECKs {have['checks']} in PostgreSQL, {want['checks']} in SQLite")
        counted["checks"] += len(want_checks)
        for index in sorted(set(want["indexes"]) | set(have["indexes"])):
            a, b = want["indexes"].get(index), have["indexes"].get(index)
            if a is None:
                problems.append(f"{table}: index {index} in PostgreSQL only")
                continue
            if b is None:
                problems.append(f"{table}: index {index} missing in PostgreSQL")
                continue
            counted["indexes"] += 1
            if a["unique"] != b["unique"]:
                problems.append(f"index {index}: unique {b['unique']} in PostgreSQL, {a['unique']} in SQLite")
            if tuple(c.lower() for c in a["columns"]) != tuple(c.lower() for c in b["columns"]):
                problems.append(f"index {index}: columns {b['columns']} in PostgreSQL, {a['columns']} in SQLite")
            a_where = expression_tokens(a["where"]) if a["where"] else None
            b_where = expression_tokens(b["where"]) if b["where"] else None
            if a_where != b_where:
                problems.append(f"index {index}: WHERE {b['where']!r} in PostgreSQL, {a['where']!r} in SQLite")
    return problems, counted


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="the PostgreSQL database, postgres://...")
    parser.add_argument("--migrations", default=DEFAULT_MIGRATIONS, help="the migrations.rs to read")
    parser.add_argument(
        "--ignore-table",
        action="append",
        default=None,
        help="a PostgreSQL table the SQLite schema does not have (default: seed_agents_schema)",
    )
    args = parser.parse_args()
    ignored = args.ignore_table if args.ignore_table is not None else ["seed_agents_schema"]

    migrations = read_migrations(args.migrations)
    sqlite, others = sqlite_schema(migrations)
    postgres = pg_schema(args.url)
    problems, counted = compare(sqlite, postgres, ignored)
    for name in others:
        problems.append(f"SQLite has trigger or view {name}; this check does not compare those")

    print(f"SQLite: {len(migrations)} migrations, {len(sqlite)} tables")
    summary = ", ".join(f"{count} {what}" for what, count in counted.items())
    if problems:
        for problem in problems:
            print(f"DIFFERENCE: {problem}")
        print(f"{len(problems)} differences ({summary} compared)")
        return 1
    print(f"PostgreSQL matches: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
