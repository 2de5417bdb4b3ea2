"""Every command, every option, bad values: one ``error:`` line on stderr, exit 2, no traceback.

Each row is (argv, a fragment the error must contain). ``{name}`` in argv is a fixture path:
``kb`` a calibrated BM25 knowledge base, ``dense`` a MiniLM one (tripwires need it), files of
each kind, a folder, a missing path, a file that is not UTF-8 and a free ``port`` (serve binds
it before loading the knowledge base). ``test_every_option_has_a_row`` walks the app, so a new
command or option fails the suite until it has a row here.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import typer

from ragbound.cli import app
from tests.cli.runner import run
from tests.serve.server import free_port
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

ROWS: list[tuple[str, str]] = [
    # ---------------------------------------------------------------- the app itself
    ("nosuch", "No such command 'nosuch'"),
    ("tripwire nosuch", "No such command 'nosuch'"),
    ("bench nosuch", "No such command 'nosuch'"),
    ("tripwire", "missing command"),
    ("bench", "missing command"),
    ("--bogus", "No such option: --bogus"),
    # ------------------------------------------------------------------------- index
    ("index", "Missing argument"),
    ("index {missing} --out {new}", "no such file or folder"),
    ("index {bad_utf8} --out {new}", "not UTF-8"),
    ("index {dir} --out {new}", "no documents found"),
    ("index {records} --bogus 1", "No such option: --bogus"),
    ("index {records}", "Missing option '--out'"),
    ("index {records} --out {file}", "is a file"),
    ("index {records} --out {new} --embedder nosuch", "unknown embedder"),
    ("index {records} --out {new} --embedder bm25 --chunk-words 0", "'--chunk-words'"),
    ("index {records} --out {new} --embedder bm25 --chunk-words abc", "'--chunk-words'"),
    ("index {records} --out {new} --embedder bm25 --overlap -1", "'--overlap'"),
    ("index {records} --out {new} --embedder bm25 --chunk-words 5 --overlap 9", "overlap must"),
    ("index {records} --out {new} --embedder bm25 --text-field nosuch", "(field 'nosuch')"),
    ("index {records} --out {new} --embedder bm25 --id-field nosuch", "(field 'nosuch')"),
    (
        "index {records} --out {new} --embedder bm25 --group-field nosuch",
        "group field 'nosuch': no record has a value for it",
    ),
    ("index {records} --out {kb}", "already holds a knowledge base"),
    ("index {records} --out {new} --vector-dtype int8", "must be one of float32, float16"),
    (
        "index {records} --out {new} --vector-dtype float16 --backing postgresql://u@h/db",
        "stores vectors as float32, not float16",
    ),
    ("index {records} --out {new} --backing mysql://u@h/db", "not a postgresql:// URL"),
    ("index {records} --out {new} --backing postgresql://u:pw@h/db", "holds a password"),
    (
        "index {records} --out {new} --backing 'postgresql://u@h/db?table=a b'",
        "not a plain SQL name",
    ),
    ("index {records} --out {new} --backing postgresql://u@127.0.0.1:1/db", "cannot reach"),
    ("index {records} --out {kb} --backing postgresql://u@127.0.0.1:1/db", "new or empty folder"),
    (
        "index {records} --out {new} --backing postgresql://u@h/db?search=hnsw&ef_search=0",
        "ef_search must",
    ),
    ("index {records} --out {new} --embedder bm25 --granularity page", "unknown unit 'page'"),
    ("index {records} --out {new} --embedder bm25 --granularity ,", "no unit given"),
    ("index {records} --out {new} --embedder bm25 --window-sentences 1", "must be at least 2"),
    ("index {records} --out {new} --embedder bm25 --window-sentences x", "'--window-sentences'"),
    ("index {records} --out {new} --search fuzzy", "'--search': must be one of exact, hnsw"),
    ("index {records} --out {new} --search hnsw --ef-search 0", "'--ef-search'"),
    ("index {records} --out {new} --search hnsw --ef-search x", "'--ef-search'"),
    ("index {records} --out {new} --search hnsw --m 1", "'--m': must be in 2..256"),
    ("index {records} --out {new} --search hnsw --rescore 65", "'--rescore': must be in 0..64"),
    ("index {records} --out {new} --rescore 2", "--rescore apply to --search hnsw only"),
    (
        "index {records} --out {new} --search hnsw --graph-precision float64",
        "'--graph-precision': must be one of float32, float16",
    ),
    ("index {records} --out {new} --graph-precision float16", "apply to --search hnsw only"),
    ("index {records} --out {new} --embedder bm25 --search hnsw", "use a dense embedder, not bm25"),
    (
        "index {records} --out {new} --granularity chunk,sentence --backing postgresql://u@h/db",
        "cannot store sentence units (it stores chunk)",
    ),
    (
        "index {records} --out {new} --search hnsw --backing postgresql://u@h/db",
        "add search=hnsw&ef_search=N to the --backing URL",
    ),
    # --------------------------------------------------------------------------- add
    ("add {kb}", "Missing argument"),
    ("add {missing} {records}", "does not exist"),
    ("add {kb} {missing}", "no such file or folder"),
    ("add {kb} {bad_utf8}", "not UTF-8"),
    ("add {kb} {records} --bogus", "No such option: --bogus"),
    # ------------------------------------------------------------------------ attach
    ("attach", "Missing argument"),
    (
        "attach --out {new} qdrant://127.0.0.1:1/docs --text-column c",
        "--text-column: not an option",
    ),
    ("attach --out {new} 'qdrant+path:///nowhere'", "must be qdrant+path:///ABSOLUTE/FOLDER"),
    ("attach --out {new} qdrant://127.0.0.1:1/docs --hnsw-ef 0", "'--hnsw-ef'"),
    (
        "attach --out {new} qdrant://127.0.0.1:1/docs --text-field t --doc-field d "
        "--vector-name v --hnsw-ef 8",
        "--hnsw-ef applies to --search hnsw only",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} mysql://u@h/db",
        "not a store ragbound attaches to",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u:pw@h/db",
        "holds a password",
    ),
    (
        "attach --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db",
        "attaching a postgresql store needs --table",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --table 'a b'",
        "'--table'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --table a.b.c",
        "not a plain SQL name",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --text-column 1x",
        "'--text-column'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --vector-column 'v;drop'",
        "'--vector-column'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --id-column a.b",
        "'--id-column'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --where noequals",
        "must be COLUMN=VALUE",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --where '=v'",
        "'--where'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --sample 0",
        "'--sample'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --embedder nosuch",
        "unknown embedder",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --embedder bm25",
        "dense embedder",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {file} postgresql://u@127.0.0.1:1/db",
        "is a file",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db",
        "cannot reach the PostgreSQL database",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --search ivfflat",
        "'--search'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --ef-search 0",
        "'--ef-search'",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --ef-search 20",
        "ef_search applies to search=hnsw only",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db?table=t",
        "not in the URL",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {kb} postgresql://u@127.0.0.1:1/db",
        "new or empty folder",
    ),
    ("attach --out {new} chroma://127.0.0.1:1", "names no collection"),
    (
        "attach --out {new} chroma://127.0.0.1:1/docs --table t",
        "--table: not an option of chroma stores",
    ),
    (
        "attach --table t --text-column c --vector-column v --out {new} postgresql://u@127.0.0.1:1/db --doc-field d",
        "--doc-field: not an option of postgresql stores",
    ),
    (
        "attach --out {new} chroma://127.0.0.1:1/docs",
        "cannot reach the Chroma server at 127.0.0.1:1",
    ),
    # --------------------------------------------------------------------- calibrate
    ("calibrate {kb}", "give in-knowledge questions: --queries FILE, --conversations FILE or"),
    ("calibrate {kb} --conversations {missing}", "no such file"),
    ("calibrate {kb} --conversations {dir}", "not a file"),
    ("calibrate {kb} --conversations {bad_utf8}", "not UTF-8"),
    ("calibrate {kb} --conversations {queries_jsonl}", "(field 'messages' or 'turns'): missing"),
    ("calibrate {kb} --conversations {log} --reading nosuch", "'--reading': must be one of"),
    ("calibrate {kb} --queries {queries} --reading last", "give --conversations FILE"),
    (
        "calibrate {kb} --conversations {chats} --reading follow-mean",
        "follow-mean searches a mean of turn vectors",
    ),
    ("calibrate {kb} --queries {queries} --llm local", "give --conversations FILE"),
    ("calibrate {missing} --queries {queries}", "does not exist"),
    ("calibrate {file} --queries {queries}", "does not exist"),
    ("calibrate {kb} --queries {missing}", "no such file"),
    ("calibrate {kb} --queries {dir}", "not a file"),
    ("calibrate {kb} --queries {bad_utf8}", "not UTF-8"),
    ("calibrate {kb} --queries {queries_jsonl} --field nosuch", "(field 'nosuch'): missing"),
    ("calibrate {kb} --queries {queries_jsonl} --field Q", "did you mean 'q'? (field names are"),
    ("calibrate {kb} --queries {keyed}", ": missing; fields present: Question; did you mean"),
    ("calibrate {kb} --queries {big_object}", "fields present: version, id0, id1, id2, id3, id4,"),
    ("calibrate {kb} --queries {queries} --k 0", "'--k': must be at least 1"),
    ("calibrate {kb} --queries {queries} --k 3.5", "'--k'"),
    ("calibrate {kb} --queries {queries} --k 100000", "larger than the knowledge base"),
    ("calibrate {kb} --queries {queries} --tau 0", "'--tau': must be greater than 0"),
    ("calibrate {kb} --queries {queries} --tau inf", "'--tau': must be a finite number"),
    ("calibrate {kb} --queries {queries} --tau abc", "'--tau': must be 'auto' or a number"),
    ("calibrate {kb} --queries {queries} --tau -1", "'--tau': must be greater than 0"),
    ("calibrate {kb} --queries {queries} --p-value-method exact", "'--p-value-method'"),
    ("calibrate {kb} --queries {queries} --granularity page", "'--granularity': unknown unit"),
    ("calibrate {kb} --queries {queries} --granularity sentence", "does not index sentence"),
    ("calibrate {kb} --queries {queries} --statistic foo", "'--statistic': must be one of"),
    ("calibrate {kb} --queries {queries} --seed -1", "'--seed'"),
    ("calibrate {kb} --queries {queries} --seed x", "'--seed'"),
    (
        "calibrate {kb} --queries {queries} --statistic combined --granularity chunk",
        "takes no --granularity or --reranker",
    ),
    ("calibrate {kb} --queries {held} --statistic auto", "at least 4 queries to learn from"),
    ("calibrate {kb} --queries {queries} --alpha 2", "'--alpha': must be between 0 and 1"),
    ("calibrate {kb} --queries {queries} --alpha 0", "'--alpha': must be between 0 and 1"),
    ("calibrate {kb} --queries {queries} --alpha nan", "'--alpha': must be a finite number"),
    ("calibrate {kb} --queries {queries} --alpha abc", "'--alpha'"),
    ("calibrate {kb} --queries {queries} --reranker {missing}", "no such folder"),
    ("calibrate {kb} --queries {queries} --reranker {file}", "no such folder"),
    ("calibrate {kb} --queries {queries} --reranker {dir}", "has no config.json"),
    ("calibrate {kb} --queries {queries} --reranker {dense}", "has no config.json"),
    ("calibrate {kb} --queries {queries} --real-queries {missing}", "no such file"),
    ("calibrate {kb} --queries {queries} --real-queries {dir}", "not a file"),
    ("calibrate {kb} --queries {queries} --k 3 --real-queries {bad_utf8}", "not UTF-8"),
    ("calibrate {kb} --queries {queries} --questions human", "'--questions': must be one of"),
    ("calibrate {kb} --queries {queries} --questions ''", "'--questions': must be one of"),
    ("calibrate {kb} --queries {queries} --null-queries {missing}", "no such file"),
    ("calibrate {kb} --queries {queries} --null-queries {dir}", "not a file"),
    ("calibrate {kb} --queries {queries} --statistic combined --null-queries {bad_utf8}", "UTF-8"),
    ("calibrate {kb} --queries {queries} --null-queries {held}", "needs --statistic combined"),
    (
        "calibrate {kb} --queries {queries} --statistic auto --null-queries {records}",
        "and 2 to make the null, got",
    ),
    ("calibrate {kb} --queries {queries} --answerability llm", "'--answerability': must be one"),
    (
        "calibrate {kb} --queries {queries} --answerability coverage --llm local",
        "also judges with --answerability judge",
    ),
    (
        "calibrate {kb} --queries {queries} --answerability judge --llm nonsense",
        "unknown LLM spec 'nonsense'",
    ),
    (
        "calibrate {kb} --queries {queries} --statistic combined --answerability coverage",
        "the answerability test needs a statistic of the similarities",
    ),
    # ------------------------------------------------------------------------ decide
    ("decide", "Missing argument"),
    ("decide {kb}", "give queries as arguments, --queries FILE or --conversations FILE"),
    ("decide {missing} bees", "does not exist"),
    ("decide {uncalibrated} bees", "no calibration yet"),
    ("decide {kb} --queries {missing}", "no such file"),
    ("decide {kb} --queries {dir}", "not a file"),
    ("decide {kb} --queries {bad_utf8}", "not UTF-8"),
    ("decide {kb} --queries {queries_jsonl} --field nosuch", "(field 'nosuch'): missing"),
    ("decide {kb} --queries {chats}", "a file of conversations: give it with --conversations"),
    ("decide {kb} --conversations {missing}", "no such file"),
    ("decide {kb} --conversations {queries_jsonl}", "'turns'): missing; fields present: q; a file"),
    ("decide {kb} --conversations {queries}", "plain text; a file of queries: give it with"),
    ("decide {kb} --conversations {log} --reading nosuch", "'--reading': must be one of"),
    ("decide {kb} --conversations {missing} --llm local", "no such file"),  # before --llm
    ("decide {kb} --conversations {chats} --reading last --llm local", "not last"),
    ("decide {kb} bees --conversations {chats}", "give queries or --conversations FILE, not both"),
    ("decide {kb} --queries {queries} --conversations {chats}", "not both"),
    ("decide {kb} --conversations {chats} --field q", "--field names the query field of --queries"),
    ("decide {kb} bees --every-turn", "read conversations: give --conversations FILE"),
    ("decide {kb} bees --reading last", "read conversations: give --conversations FILE"),
    ("decide {kb} bees --llm local", "read conversations: give --conversations FILE"),
    ("decide {kb} bees --statistic mss", "No such option: --statistic"),
    ("decide {kb} bees --alpha 1", "'--alpha'"),
    ("decide {kb} bees --alpha -0.5", "'--alpha'"),
    ("decide {kb} bees --evidence -1", "'--evidence': must be at least 0"),
    ("decide {kb} bees --evidence abc", "'--evidence'"),
    ("decide {kb} bees --force=yes", "'--force'"),
    ("decide {kb} bees --json=yes", "'--json'"),
    ("serve {kb} --force=yes", "'--force'"),
    # ---------------------------------------------------------------------- evaluate
    ("evaluate {kb} --in-knowledge {held}", "Missing option '--out-of-knowledge'"),
    ("evaluate {kb} --in-knowledge {missing} --out-of-knowledge {ook}", "no such file"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {dir}", "not a file"),
    ("evaluate {kb} --in-knowledge {bad_utf8} --out-of-knowledge {ook}", "not UTF-8"),
    ("evaluate {kb} --in-knowledge {queries} --out-of-knowledge {ook}", "calibration queries"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --samples 0", "'--samples'"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --runs 0", "'--runs'"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --seed -1", "'--seed'"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --seed 1.5", "'--seed'"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --run {file}", "is a file"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --plot {file}", "is a file"),
    (
        "evaluate {kb} --in-knowledge {queries_jsonl} --out-of-knowledge {ook} --field nosuch",
        "(field 'nosuch'): missing",
    ),
    ("evaluate {missing} --in-knowledge {held} --out-of-knowledge {ook}", "does not exist"),
    ("evaluate {kb} --in-knowledge {held} --out-of-knowledge {ook} --force=1", "'--force'"),
    # ------------------------------------------------------------------------- shift
    ("shift {kb}", "Missing option '--queries'"),
    ("shift {kb} --queries {missing}", "no such file"),
    ("shift {kb} --queries {dir}", "not a file"),
    ("shift {kb} --queries {bad_utf8}", "not UTF-8"),
    ("shift {kb} --queries {queries} --alpha 2", "'--alpha': must be between 0 and 1"),
    ("shift {kb} --queries {queries} --test mmd --alpha 2", "'--alpha'"),
    ("shift {kb} --queries {queries} --test foo", "'--test': must be one of ks, mmd"),
    ("shift {kb} --queries {log} --window 6 --test mmd", "use --test ks"),
    ("shift {kb} --queries {log} --correction foo", "'--correction'"),
    ("shift {kb} --queries {log} --period 0", "'--period'"),
    ("shift {kb} --queries {log} --period 96", "'--period'"),
    ("shift {kb} --queries {log} --period 1y", "'--period'"),
    ("shift {kb} --queries {log} --correction period", "needs a period"),
    ("shift {kb} --queries {log} --period 1d", "only with correction 'period'"),
    ("shift {kb} --queries {log} --arl 1", "'--arl': must be greater than 1"),
    ("shift {kb} --queries {log} --arl nan", "'--arl'"),
    ("shift {kb} --queries {log} --arl abc", "'--arl'"),
    ("shift {kb} --queries {log} --arl 100", "only with correction 'arl'"),
    ("shift {kb} --queries {log} --correction arl", "needs"),
    ("shift {kb} --queries {queries} --statistic foo", "'--statistic'"),
    ("shift {kb} --queries {log} --window 1", "'--window': a window needs at least 2 queries"),
    ("shift {kb} --queries {log} --window abc", "'--window'"),
    ("shift {kb} --queries {log} --window 0m", "'--window'"),
    ("shift {kb} --queries {log} --window nanm", "'--window'"),
    ("shift {kb} --queries {log} --step 0", "'--step': must be greater than 0"),
    ("shift {kb} --queries {log} --step nan", "'--step': must be a finite number"),
    ("shift {kb} --queries {log} --window 2m --step 0.00001", "--step 1e-05 is too small"),
    ("shift {kb} --queries {log} --window 6 --step 1.5", "whole number of queries"),
    ("shift {kb} --queries {log} --window 6 --step 9", "whole number of queries"),
    ("shift {kb} --queries {log} --window 6 --time-field nosuch", "(field 'nosuch'): missing"),
    ("shift {kb} --queries {log} --engine spark", "'--engine': must be one of local, ray"),
    ("shift {kb} --queries {log} --address auto", "--address needs --engine ray"),
    ("shift {kb} --queries {log} --workers 0", "'--workers'"),
    ("shift {kb} --queries {queries} --test mmd --engine ray", "use --engine local"),
    (
        "shift {kb} --queries {log} --engine ray --address 127.0.0.1:9",
        "--address 127.0.0.1:9: no Ray cluster answers there",
    ),
    ("shift {kb} --queries {log} --window 6 --query-field nosuch", "(field 'nosuch'): missing"),
    ("shift {kb} --queries {log} --window 6 --state {dir}", "monitor state is corrupt"),
    ("shift {kb} --queries {queries} --run {file}", "is a file"),
    ("shift {kb} --queries {log} --plot {file}", "is a file"),
    ("shift {kb} --queries {queries_jsonl} --field nosuch", "(field 'nosuch'): missing"),
    ("shift {kb} --queries {log} --restart=1", "'--restart'"),
    ("shift {kb} --queries {queries} --force=yes", "'--force'"),
    ("shift {uncalibrated} --queries {queries}", "no calibration yet"),
    # ------------------------------------------------------------------------- score
    ("test-log {kb}", "Missing argument"),
    ("test-log {kb} {log}", "Missing option '--out'"),
    ("test-log {missing} {log} --out {new}.jsonl", "does not exist"),
    ("test-log {kb} {missing} --out {new}.jsonl", "no such file"),
    ("test-log {kb} {log} --out {new}", "write scores to a .jsonl or .parquet file"),
    ("test-log {kb} {log} --out {dir}", "is a folder"),
    (
        "test-log {kb} {log} --out {new}.jsonl --engine spark",
        "'--engine': must be one of local, ray",
    ),
    ("test-log {kb} {log} --out {new}.jsonl --address auto", "--address needs --engine ray"),
    (
        "test-log {kb} {log} --out {new}.jsonl --engine ray --address 127.0.0.1:9",
        "--address 127.0.0.1:9: no Ray cluster answers there",
    ),
    ("test-log {kb} {log} --out {new}.jsonl --engine ray --address ' '", "'--address'"),
    ("test-log {kb} {log} --out {new}.jsonl --workers 0", "'--workers'"),
    ("test-log {kb} {log} --out {new}.jsonl --statistic nosuch", "'--statistic'"),
    ("test-log {kb} {log} --out {new}.jsonl --alpha 2", "'--alpha'"),
    ("test-log {kb} {log} --out {new}.jsonl --field nosuch", "(field 'nosuch')"),
    ("test-log {kb} {log} --out {new}.jsonl --force=yes", "'--force'"),
    # ------------------------------------------------------------------------- serve
    ("serve", "Missing argument"),
    ("serve {missing} --port {port}", "does not exist"),
    ("serve {uncalibrated} --port {port}", "no calibration yet"),
    ("serve {kb} --host 0.0.0.0", "refusing to listen on 0.0.0.0 without --token-file"),
    ("serve {kb} --port 99999", "'--port'"),
    ("serve {kb} --allowed-host ragbound.test:8000", "--allowed-host takes a host name without"),
    ("serve {kb} --canary-minutes -1", "'--canary-minutes': must be a finite number >= 0"),
    ("serve {kb} --canary-minutes nan", "'--canary-minutes'"),
    ("serve {kb} --token-file {missing}", "no such file"),
    ("serve {kb} --token-file {bad_utf8}", "not UTF-8"),
    ("serve {kb} --token-file {file}", ":1: expected 'read:TOKEN' or 'admin:TOKEN'"),
    ("serve {kb} --log {dir}", "is a folder"),
    ("serve {kb} --port {port} --log {log}", "not a decision log written by ragbound serve"),
    ("serve {kb} --log-queries some", "'--log-queries': must be one of full, hash, none"),
    ("serve {kb} --threads 0", "'--threads'"),
    ("serve {kb} --reading guess", "'--reading': must be one of follow"),
    ("serve {kb} --llm local", "--llm is for the rewrite reading"),
    ("serve {kb} --reading last --llm local", "--llm is for the rewrite reading, not last"),
    ("serve {kb} --tripwire-instructions=yes", "'--tripwire-instructions'"),
    ("serve {kb} --workers 0", "'--workers'"),
    ("serve {kb} --max-connections 0", "'--max-connections'"),
    ("serve {kb} --max-connections many", "'--max-connections'"),
    ("serve {kb} --max-connections 100000000", "needs 100000320 open files"),
    ("serve {kb} --max-head-bytes 0", "'--max-head-bytes': must be a size"),
    ("serve {kb} --max-head-bytes 32XB", "'--max-head-bytes': must be a size"),
    ("serve {kb} --max-url-bytes -1", "'--max-url-bytes': must be a size"),
    ("serve {kb} --max-headers 0", "'--max-headers'"),
    ("serve {kb} --head-timeout 0", "'--head-timeout': must be greater than 0"),
    ("serve {kb} --head-timeout nan", "'--head-timeout': must be a finite number"),
    ("serve {kb} --body-timeout -1", "'--body-timeout': must be greater than 0"),
    ("serve {kb} --body-min-rate fast", "'--body-min-rate': must be a size"),
    ("serve {kb} --keep-alive-timeout inf", "'--keep-alive-timeout': must be a finite number"),
    ("serve {kb} --send-timeout 0", "'--send-timeout': must be greater than 0"),
    ("serve {kb} --log {new} --log-max-bytes 10XB", "'--log-max-bytes': must be a size"),
    ("serve {kb} --log {new} --log-max-bytes 0", "'--log-max-bytes': must be a size"),
    ("serve {kb} --log {new} --log-rotate hourly", "'--log-rotate': must be one of daily"),
    ("serve {kb} --log-max-bytes 1MB", "rotate the --log: give --log"),
    ("serve {kb} --tracing=yes", "'--tracing'"),
    ("serve {kb} --alpha 0", "'--alpha': must be between 0 and 1"),
    ("serve {kb} --alpha 1.5", "'--alpha': must be between 0 and 1"),
    ("serve {kb} --alpha nan", "'--alpha': must be a finite number"),
    ("serve {kb} --alpha often", "'--alpha'"),
    ("serve {kb} --upstream ftp://host/v1", "'--upstream': must be an http:// or https:// URL"),
    ("serve {kb} --upstream-key-file {file}", "need --upstream"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --upstream-key-file {missing}", "no such file"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --upstream-key-file {bad_utf8}", "not UTF-8"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --context-template {file}", "no {context}"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --context-template {dir}", "not a file"),
    ("serve {kb} --pass-through", "need --upstream"),
    (
        "serve {kb} --upstream http://127.0.0.1:9/v1 --pass-through --context-template {file}",
        "drop --context-template",
    ),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --context-chunks 0", "'--context-chunks'"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --context-chars -1", "'--context-chars'"),
    ("serve {kb} --context-chars 2000", "need --upstream"),
    ("serve {kb} --upstream-timeout 5", "need --upstream"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --upstream-timeout 0", "'--upstream-timeout'"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --upstream-timeout nan", "must be a finite"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --upstream-timeout soon", "'--upstream-timeout'"),
    (
        "serve {kb} --upstream http://127.0.0.1:9/v1 --pass-through --context-chunks 2",
        "drop --context-template, --context-chunks",
    ),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --refusal ' '", "'--refusal': must not be"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --abstention ''", "'--abstention': must not"),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --unanswerable ' '", "'--unanswerable': must"),
    (
        "serve {kb} --upstream http://127.0.0.1:9/v1 --refusal 'No {{why}}'",
        "the --refusal template has an unknown field {why}; its fields are {cause}, {reason}",
    ),
    (
        "serve {kb} --upstream http://127.0.0.1:9/v1 --abstention 'p {{p_value:q}}'",
        "the --abstention template does not format",
    ),
    ("serve {kb} --upstream http://127.0.0.1:9/v1 --unanswerable 'No {{}}'", "does not format"),
    # ------------------------------------------------------------------------ report
    ("report", "Missing argument"),
    ("report {missing}", "no such run folder"),
    ("report {dir}", "nothing to report"),
    ("report {dir} --out {dir}", "is a folder"),
    ("report {dir} --plot {file}", "is a file"),
    # ------------------------------------------------------------------------- synth
    ("synth {kb}", "Missing option '--out'"),
    ("synth {missing} --out {new}", "does not exist"),
    ("synth {kb} --out {dir}", "is a folder"),
    ("synth {kb} --out {new} --n 0", "'--n': must be at least 1"),
    ("synth {kb} --out {new} --n many", "'--n'"),
    ("synth {kb} --out {new} --llm bogus", "unknown LLM spec 'bogus'"),
    ("synth {kb} --out {new} --llm local:{missing}", "missing"),
    ("synth {kb} --out {new} --seed -3", "'--seed'"),
    ("synth {kb} --out {new} --examples nope.json", "examples file not found"),
    ("synth {kb} --out {new} --prompt nosuch", "unknown prompt 'nosuch'"),
    ("synth {kb} --out {new} --prompt ' '", "'--prompt': must not be empty"),
    ("synth {kb} --out {new} --examples ' '", "'--examples': must not be empty"),
    ("synth {kb} --out {new} --context page", "'--context': must be one of document, chunk"),
    ("synth {kb} --out {new} --group-by nosuch", "no chunk has the metadata field 'nosuch'"),
    ("synth {kb} --out {new} --max-requests 0", "'--max-requests'"),
    ("synth {kb} --out {new} --concurrency 0", "'--concurrency'"),
    # ---------------------------------------------------------------- tripwire add
    ("tripwire add {dense}", "Missing argument"),
    ("tripwire add {dense} {missing}", "no such file"),
    ("tripwire add {dense} {dir}", "not a file"),
    ("tripwire add {dense} {bad_utf8}", "not UTF-8"),
    ("tripwire add {kb} {tripwires}", "tripwires need a dense knowledge base"),
    ("tripwire add {missing} {tripwires}", "does not exist"),
    ("tripwire add {dense} {tripwires} --text-field nosuch", "(field 'nosuch'): missing"),
    ("tripwire add {dense} {tripwires} --topic-field nosuch", "(field 'nosuch'): no topic"),
    ("tripwire add {dense} {untopical} --topic ' '", "topic"),
    ("tripwire add {dense} {tripwires} --label-field nosuch", "(field 'nosuch'): missing"),
    ("tripwire add {dense} {tripwires} --label-field topic --label nosuch", "no tripwires"),
    # ------------------------------------------------------------- tripwire remove
    ("tripwire remove", "Missing argument"),
    ("tripwire remove {missing} --topic harm", "does not exist"),
    ("tripwire remove {dense} --topic nosuch", "nosuch"),
    ("tripwire remove {dense} --id nosuch", "nosuch"),
    ("tripwire remove {dense}", "name the tripwires to remove"),
    # --------------------------------------------------------------- tripwire list
    ("tripwire list", "Missing argument"),
    ("tripwire list {missing}", "does not exist"),
    ("tripwire list {dense} --history=1", "'--history'"),
    # ----------------------------------------------------------- tripwire generate
    ("tripwire generate {dense}", "Missing option '--topics'"),
    ("tripwire generate {dense} --topics {missing}", "no such file"),
    ("tripwire generate {dense} --topics {bad_utf8}", "not UTF-8"),
    ("tripwire generate {dense} --topics {topics} --per-topic 0", "'--per-topic'"),
    ("tripwire generate {dense} --topics {topics} --llm bogus", "unknown LLM spec 'bogus'"),
    ("tripwire generate {dense} --topics {topics} --out {dir}", "is a folder"),
    ("tripwire generate {dense} --topics {topics} --concurrency 0", "'--concurrency'"),
    ("tripwire generate {dense} --topics {topics} --add=1", "'--add'"),
    # --------------------------------------------------------------- tripwire tune
    ("tripwire tune {dense}", "Missing option '--labelled'"),
    ("tripwire tune {dense} --labelled {missing}", "no such file"),
    ("tripwire tune {dense} --labelled {bad_utf8}", "not UTF-8"),
    ("tripwire tune {dense} --labelled {labelled} --objective foo", "'--objective'"),
    ("tripwire tune {dense} --labelled {labelled} --max-frr 2", "'--max-frr'"),
    ("tripwire tune {dense} --labelled {labelled} --max-frr -0.1", "'--max-frr'"),
    ("tripwire tune {dense} --labelled {labelled} --field nosuch", "field 'nosuch'"),
    ("tripwire tune {dense} --labelled {labelled} --label-field nosuch", "field 'nosuch'"),
    ("tripwire tune {dense} --labelled {labelled} --run {file}", "is a file"),
    ("tripwire tune {dense} --labelled {labelled}", "holds no tripwires"),
    ("tripwire tune {dense} --labelled {labelled} --save=1", "'--save'"),
    # -------------------------------------------------------------- tripwire check
    ("tripwire check {dense}", "give queries as arguments or with --queries FILE"),
    ("tripwire check {dense} --queries {dir}", "not a file"),
    ("tripwire check {dense} --queries {bad_utf8}", "not UTF-8"),
    ("tripwire check {dense} bees --k 0", "'--k': must be at least 1"),
    ("tripwire check {dense} bees --k 3.5", "'--k'"),
    ("tripwire check {dense} bees --llm bogus", "unknown LLM spec 'bogus'"),
    ("tripwire check {missing} bees", "does not exist"),
    # ------------------------------------------------------------------ bench facts
    ("bench facts {records}", "Missing option '--out'"),
    ("bench facts {missing} --out {new}", "missing"),
    ("bench facts {bad_utf8} --out {new}", "not UTF-8"),
    ("bench facts {records} --out {dir}", "is a folder"),
    ("bench facts {records} --out {new} --llm bogus", "unknown LLM spec 'bogus'"),
    ("bench facts {records} --out {new} --window 0", "'--window'"),
    ("bench facts {records} --out {new} --concurrency 0", "'--concurrency'"),
    ("bench facts {records} --out {new} --skip-empty=1", "'--skip-empty'"),
    # --------------------------------------------------------------------- bench qa
    ("bench qa {missing} --out {new}", "no such file"),
    ("bench qa {bad_utf8} --out {new}", "fact set"),
    ("bench qa {qaset} --out {new}", "format"),
    ("bench qa {qaset} --out {dir}", "is a folder"),
    ("bench qa {qaset} --out {new} --concurrency 0", "'--concurrency'"),
    ("bench qa {qaset} --out {new} --llm bogus", "format"),
    # ----------------------------------------------------------------- bench import
    ("bench import {missing} --out {new}", "no such file"),
    ("bench import {bad_utf8_json} --out {new}", "not UTF-8"),
    ("bench import {queries} --out {new}", "expected an object with a question and an answer"),
    ("bench import {qa_pairs} --out {new} --question-field nosuch", "(field 'nosuch')"),
    ("bench import {qa_pairs} --out {new} --answer-field nosuch", "(field 'nosuch')"),
    ("bench import {qa_pairs} --out {new} --id-field nosuch", "(field 'nosuch')"),
    ("bench import {qa_pairs} --out {dir}", "is a folder"),
    # ----------------------------------------------------------------- bench filter
    ("bench filter {missing} --out {new}", "no such file"),
    ("bench filter {bad_utf8} --out {new}", "QA set"),
    ("bench filter {qaset} --out {dir}", "is a folder"),
    ("bench filter {qaset} --out {new} --method foo", "'--method'"),
    ("bench filter {qaset} --out {new} --keyword-threshold 2", "'--keyword-threshold'"),
    ("bench filter {qaset} --out {new} --semantic-threshold inf", "'--semantic-threshold'"),
    ("bench filter {qaset} --out {new} --semantic-threshold -5", "semantic threshold"),
    ("bench filter {qaset} --out {new} --embedder nosuch", "unknown embedder"),
    # -------------------------------------------------------------------- bench run
    ("bench run", "Missing argument"),
    ("bench run {missing}", "no such file"),
    ("bench run {dir}", "not a file"),
    ("bench run {bad_config}", "unknown setting"),
    ("bench run {bad_utf8_toml}", "not UTF-8"),
    ("bench run {bad_config} --limit 0", "'--limit'"),
    ("bench run {bad_config} --out {file}", "is a file"),
    # --------------------------------------------------------------- bench evaluate
    ("bench evaluate {missing}", "not a benchmark run"),
    ("bench evaluate {dir} --llm bogus", "unknown LLM spec 'bogus'"),
    ("bench evaluate {dir} --spec nosuch", "unknown evaluation spec 'nosuch'"),
    ("bench evaluate {dir} --spec-file {missing}", "no such file"),
    ("bench evaluate {dir} --spec-file {bad_utf8_toml}", "not UTF-8"),
    ("bench evaluate {dir} --concurrency 0", "'--concurrency'"),
    ("bench evaluate {dir} --max-tokens 3", "'--max-tokens': must be at least 16"),
    ("bench evaluate {dir} --factuality-on-abstentions=1", "'--factuality-on-abstentions'"),
    # ------------------------------------------------------------------ bench label
    ("bench label {dir}", "Missing option '--annotator'"),
    ("bench label {missing} --annotator ann", "not a benchmark run"),
    ("bench label {dir} --annotator ''", "'--annotator': must not be empty"),
    ("bench label {dir} --annotator ann --n 0", "'--n'"),
    ("bench label {dir} --annotator ann --seed -1", "'--seed'"),
    ("bench label {dir} --annotator ann --task nosuch", "unknown evaluation spec 'nosuch'"),
    ("bench label {dir} --annotator ann --spec-file {dir}", "not a file"),
    ("bench label {dir} --annotator ann --port 99999", "'--port'"),
    ("bench label {dir} --annotator ann --web=1", "'--web'"),
    # -------------------------------------------------------------- bench agreement
    ("bench agreement", "Missing argument"),
    ("bench agreement {dir}", "no labels yet"),
    # ---------------------------------------------------------------- bench results
    ("bench results {missing}", "not a benchmark run"),
    ("bench results {dir} --evaluator judge", "not a benchmark run"),
    ("bench results {dir} --groups {missing}", "no such file"),
    ("bench results {dir} --groups {bad_utf8}", "not UTF-8"),
    ("bench results {dir} --confidence 1", "'--confidence'"),
    ("bench results {dir} --interval foo", "'--interval'"),
    ("bench results {dir} --seed -1", "'--seed'"),
]

# Options that accept any value (a name, or a flag): no bad value exists.
ANY_VALUE = {
    ("bench qa", "--name"),  # the name of the set: any text
    ("bench import", "--name"),
    ("tripwire add", "--id-field"),  # optional: records without it get a content hash
    ("test-log", "--time-field"),  # copied when present: rows without it get time null
}


@pytest.fixture(scope="session")
def paths(
    corpus_dir: Path, minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Fixture files for the table (nothing in a row writes: every row fails first)."""
    from ragbound.artifacts import write_json
    from ragbound.bench.qa import import_qa
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase

    root = tmp_path_factory.mktemp("bad_input")
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    kb.save(root / "uncalibrated")
    kb.save(root / "kb")
    calibration = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE  # a shift test needs 20 or more
    Guard.calibrate(KnowledgeBase.load(root / "kb"), calibration, k=3).save()
    shutil.copytree(minilm_kb_dir, root / "dense")
    files = {
        "queries.txt": "\n".join(calibration) + "\n",
        "queries.jsonl": "".join(json.dumps({"q": q}) + "\n" for q in IN_KNOWLEDGE),
        "held.txt": "What do bees make?\nWhat is a locomotive?\n",
        "ook.txt": "\n".join(OUT_OF_KNOWLEDGE) + "\n",
        "records.jsonl": json.dumps({"text": "Bees make honey.", "id": "b1"}) + "\n",
        "chats.jsonl": json.dumps({"messages": [{"role": "user", "content": "Do bees dance?"}]})
        + "\n",
        "log.jsonl": "".join(
            json.dumps({"time": f"2026-11-01T10:{i:02d}:00Z", "query": q}) + "\n"
            for i, q in enumerate(IN_KNOWLEDGE)
        ),
        "tripwires.jsonl": "".join(
            json.dumps({"text": t, "topic": "harm"}) + "\n"
            for t in ("How do I hurt someone?", "How do I make a weapon?")
        ),
        "untopical.jsonl": json.dumps({"text": "How do I hurt someone?"}) + "\n",
        "labelled.csv": "query,label\nHow do I hurt someone?,unsafe\nWhat do bees make?,safe\n",
        "topics.jsonl": json.dumps({"topic": "harm", "description": "violence"}) + "\n",
        "qa_pairs.json": json.dumps([{"question": "What do bees make?", "answer": "Honey."}]),
        "keyed.json": json.dumps({f"x{i}": {"Question": q} for i, q in enumerate(IN_KNOWLEDGE)}),
        "big_object.json": json.dumps({"version": 1} | {f"id{i}": {"q": "?"} for i in range(500)}),
        "bad_config.toml": 'surprise = "x"\n',
        "plain.txt": "not a folder\n",
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    for name in ("bad_utf8.txt", "bad_utf8.json", "bad_utf8.toml"):
        (root / name).write_bytes(b'["caf\xe9"]\n')
    qa_set = import_qa(root / "qa_pairs.json")
    write_json(root / "qaset.json", qa_set.model_dump(mode="json"))
    (root / "folder").mkdir()
    named = {
        "kb": "kb",
        "uncalibrated": "uncalibrated",
        "dense": "dense",
        "queries": "queries.txt",
        "queries_jsonl": "queries.jsonl",
        "held": "held.txt",
        "ook": "ook.txt",
        "records": "records.jsonl",
        "log": "log.jsonl",
        "chats": "chats.jsonl",
        "tripwires": "tripwires.jsonl",
        "untopical": "untopical.jsonl",
        "labelled": "labelled.csv",
        "topics": "topics.jsonl",
        "qa_pairs": "qa_pairs.json",
        "keyed": "keyed.json",
        "big_object": "big_object.json",
        "qaset": "qaset.json",
        "bad_config": "bad_config.toml",
        "bad_utf8": "bad_utf8.txt",
        "bad_utf8_json": "bad_utf8.json",
        "bad_utf8_toml": "bad_utf8.toml",
        "file": "plain.txt",
        "dir": "folder",
        "missing": "missing",
        "new": "new-output.json",
    }
    return {key: str(root / name) for key, name in named.items()} | {"port": str(free_port())}


def _argv(row: str, paths: dict[str, str]) -> list[str]:
    return [token.format(**paths) for token in shlex.split(row)]


@pytest.mark.parametrize(("row", "fragment"), ROWS, ids=[row for row, _ in ROWS])
def test_bad_input_is_one_error_line(monkeypatch, capsys, paths, row: str, fragment: str):
    code, _, err = run(monkeypatch, capsys, *_argv(row, paths))
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert fragment in lines[0]
    assert not Path(paths["new"]).exists()  # nothing half-written


def _commands() -> dict[str, list[str]]:
    """Every command path ('tripwire add') and its options that take a value (not flags)."""
    found: dict[str, list[str]] = {}

    def walk(command, path: list[str]) -> None:
        children = getattr(command, "commands", None)
        if children:
            for name, child in children.items():
                walk(child, [*path, name])
            return
        found[" ".join(path)] = [
            param.opts[0]
            for param in command.params
            if param.param_type_name == "option" and not getattr(param, "is_flag", False)
        ]

    walk(typer.main.get_command(app), [])
    return found


def _command_of(row: str) -> str:
    words = []
    for word in shlex.split(row):
        if word.startswith(("-", "{")):
            break
        words.append(word)
    return " ".join(words)


def test_every_command_and_option_has_a_row():
    rows: dict[str, set[str]] = {}
    for row, _ in ROWS:
        tokens = {token.split("=")[0] for token in shlex.split(row)}
        rows.setdefault(_command_of(row), set()).update(tokens)
    missing = []
    for command, options in _commands().items():
        if command not in rows:
            missing.append(command)
            continue
        missing += [
            f"{command} {option}"
            for option in options
            if option not in rows[command] and (command, option) not in ANY_VALUE
        ]
    assert not missing, f"add rows to ROWS for: {missing}"
