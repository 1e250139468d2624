"""`sluice verify` of a PostgreSQL-fed job: every type the source supports, snapshot and
stream, through the real pipeline; equal tables verify equal without a row crossing the wire,
and each change made behind the pipeline's back is found by key and column."""

from __future__ import annotations

import json

import pytest

from python_ingest.tables.runs import last_runs
from python_ingest.verify.run import fed_jobs, verify
from tests.sources.binlog.lake import job_of, make_project, scaffold
from tests.sources.postgres.test_to_lake import run_jobs
from tests.sources.postgres.test_types import EDGES, ROW, TABLE

pytestmark = [pytest.mark.postgres_source, pytest.mark.e2e]

FILL = """INSERT INTO every_type SELECT g, g, g * 1000, g * 100000000007, g * 1.5, g / 7.0,
  g * 1e20 / 3, g / 3.0, g / 7.0, 'text ' || g, 'v' || g, 'c' || g,
  decode(lpad(to_hex(g), 4, '0'), 'hex'), g %% 2 = 0, date '2020-01-01' + g,
  timestamp '2021-03-04 05:06:07.123456' + g * interval '1 hour 1 microsecond',
  timestamptz '2021-03-04 05:06:07.5+02' + g * interval '1 day',
  time '01:02:03' + g * interval '1 minute', timetz '01:02:03+05',
  g * interval '1 day 1 second', md5(g::text)::uuid, ('{"n": ' || g || '}')::json,
  ('{"n": ' || g || ', "a": [1]}')::jsonb, ARRAY[g, NULL], ARRAY['a b', g::text],
  CASE WHEN g %% 2 = 0 THEN 'sad' ELSE 'happy' END::mood, ('10.0.0.' || g)::inet,
  '10.1.0.0/16', '08:00:2b:01:02:03', g * 1.25, B'1010', B'10', g, g / 4.0
  FROM generate_series(%s, %s) g"""
NEW_VALUES = {  # one changed value per kind of column, written behind the pipeline's back
    "i8": "-1", "num": "0.001", "num_free": "'0.0000001'", "num_wide": "'-1e-10'",
    "f4": "'-0.5'", "f8": "'1e-7'", "t": "'naïve ✓'", "ch": "'zz'", "by": "'\\x00'::bytea",
    "bo": "NOT bo", "d": "'0044-03-15 BC'", "ts": "'infinity'",
    "tstz": "tstz + interval '1 microsecond'", "tm": "'23:59:59.999999'", "iv": "'-1 day'",
    "u": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "jsb": "'{\"z\": 1}'", "ints": "'{}'",
    "m": "'happy'", "ip": "'::1'", "money_": "'0.01'", "vbits": "B'1'", "pr": "'-0.01'"}


def test_equal_then_each_change_behind_the_pipelines_back_is_found(pg_env, spark,
                                                                    capsys) -> None:
    from python_ingest.cli import main as cli

    env = pg_env
    make_project(env.tmp)
    env.sql(TABLE)
    for row_id, values in ((1, ROW), (2, {**ROW, **EDGES})):  # copied by the snapshot
        env.sql(f"INSERT INTO every_type (id, {', '.join(values)}) VALUES ({row_id}, "
                f"{', '.join(v[0] for v in values.values())})")
    env.sql(FILL, params=(3, 30))
    env.sql("INSERT INTO every_type (id) VALUES (31)")  # every value NULL
    scaffold(env)
    env.bootstrap_all()
    env.sql(FILL, params=(32, 45))  # streamed
    env.sql("UPDATE every_type SET t = 'updated', f8 = 'NaN' WHERE id IN (4, 33)",
            "DELETE FROM every_type WHERE id IN (5, 34)")
    env.tap_until_end()
    settings = env.settings()
    job = settings.job(job_of(env, "every_type"))
    assert job.name in fed_jobs(settings)
    runs = run_jobs(spark, env, [job.name])
    assert all(r.counts.get("merge_errors", 0) == 0 for r in runs)
    lake = f"lake.{job.name}"

    equal = verify(spark, settings, job, lake, range_rows=4, fanout=4, settle_s=10, quiet_s=2)
    assert equal.equal, equal.differences
    assert (equal.source_rows, equal.lake_rows) == (43, 43)
    assert equal.rows_moved == 0  # equal tables: no row crosses the wire
    assert equal.position_kind == "LSN" and equal.source_position

    # behind the pipeline's back: the tap does not run again, so the lake never sees these
    changed = env.change_rows("every_type", 6, NEW_VALUES, "DELETE FROM every_type WHERE id = 3",
                              "INSERT INTO every_type (id, t) VALUES (999, 'only in PostgreSQL')")

    # the command line (in this process: the test's session): exit code 1, each difference
    # by key and column, only the differing ranges' rows fetched, the result in meta.runs
    capsys.readouterr()
    code = cli.main(["--config", str(env.config), "verify", job.name, "--json",
                     "--range-rows", "4", "--quiet-s", "2", "--settle-s", "10"])
    out = capsys.readouterr().out
    assert code == 1, out
    (found,) = json.loads(out)
    assert not found["equal"] and found["position_kind"] == "LSN"
    kinds = {d["key"]: (d["kind"], d["columns"]) for d in found["differences"]}
    assert kinds.pop("3") == ("extra", [])
    assert kinds.pop("999") == ("missing", [])
    assert kinds == {row: ("differs", columns) for row, columns in changed.items()}
    assert found["ranges_differing"] > 0 and found["rows_moved"] < 2 * 43
    run = last_runs(spark, job.name, 1)[0]
    assert run["outcome"] == "verified-different"
    assert run["counts"]["verify_differences"] == len(changed) + 2
