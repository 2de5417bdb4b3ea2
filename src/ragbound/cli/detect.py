"""``ragbound calibrate | decide | evaluate``: the online out-of-knowledge test, and its tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import (
    console,
    emit_json,
    gather_queries,
    notice,
    progress,
    rewriter_for,
    say,
    show,
    shown,
    warnings_shown,
    wrap,
    write_plots,
)
from ragbound.cli.options import (
    LLM_HELP,
    READING_HELP,
    CalibratedKbArg,
    ConversationsOpt,
    DecisionAlphaOpt,
    FieldOpt,
    ForceOpt,
    JsonOpt,
    KbArg,
    PlotOpt,
    QueriesArg,
    QueriesFileOpt,
    ReadingOpt,
    RewriteLlmOpt,
    RunOpt,
    SeedOpt,
)
from ragbound.corpus.origins import DECLARED_ORIGINS
from ragbound.detect.names import (
    ANSWERABILITY_STATISTICS,
    APPROXIMATE,
    AUTO,
    COMBINED,
    DEFAULT_ALPHA,
    DEFAULT_K,
    DEFAULT_P_VALUE_METHOD,
    DEFAULT_STATISTIC,
    DEFAULT_TAU,
    DESCRIPTIONS,
    TAU_AUTO,
)
from ragbound.errors import InputError
from ragbound.stats.names import P_VALUE_METHODS

if TYPE_CHECKING:
    from rich.table import Table

    from ragbound.conversations.files import FileConversation
    from ragbound.conversations.model import Conversation
    from ragbound.detect.answerability import AnswerabilityVerdict
    from ragbound.detect.calibration import NullQuestions
    from ragbound.detect.combined import Selection
    from ragbound.detect.guard import Guard
    from ragbound.gate import Decision, Gate
    from ragbound.knowledge import KnowledgeBase
    from ragbound.results import EvaluationReport, Neighbour, SyntheticCheck, Verdict


def calibrate(
    kb_dir: KbArg,
    queries: Annotated[
        Path | None,
        typer.Option(
            "--queries",
            help="In-knowledge query file (standalone questions).",
            callback=validate.existing_file,
        ),
    ] = None,
    conversations: ConversationsOpt = None,
    reading: Annotated[
        str | None,
        typer.Option(help=READING_HELP + " [default: follow]", callback=validate.reading),
    ] = None,
    llm: Annotated[
        str | None,
        typer.Option(
            "--llm",
            help=f"The LLM of the rewrite reading and of --answerability judge, {LLM_HELP} "
            "[default: local].",
        ),
    ] = None,
    field: FieldOpt = None,
    k: Annotated[
        int | None,
        typer.Option(
            "--k",
            help=DESCRIPTIONS["k"]
            + f" [default: {DEFAULT_K}, or every chunk of a smaller knowledge "
            "base, with a note]",
            callback=validate.positive_int,
        ),
    ] = None,
    tau: Annotated[
        str,
        typer.Option(
            help=DESCRIPTIONS["tau"] + " 'auto' takes the embedder's training temperature.",
            callback=validate.temperature,
        ),
    ] = str(DEFAULT_TAU),
    statistic: Annotated[
        str,
        typer.Option(
            help=DESCRIPTIONS["statistic"]
            + f" The default for decide. {AUTO}: the candidate with the most power on "
            "leave-documents-out queries, or mss when those cannot tell (see below).",
            callback=validate.calibration_statistic,
        ),
    ] = DEFAULT_STATISTIC,
    alpha: Annotated[
        float,
        typer.Option(
            help="The default significance level for decide.", callback=validate.probability
        ),
    ] = DEFAULT_ALPHA,
    p_value_method: Annotated[
        str,
        typer.Option(
            help=DESCRIPTIONS["p_value_method"], callback=validate.choice(*P_VALUE_METHODS)
        ),
    ] = DEFAULT_P_VALUE_METHOD,
    reranker: Annotated[
        Path | None,
        typer.Option(help=DESCRIPTIONS["reranker"], callback=validate.reranker),
    ] = None,
    granularity: Annotated[
        str | None,
        typer.Option(
            help=(
                "Units that score chunks, among those indexed (e.g. sentence or "
                "chunk,sentence); default: the knowledge base's --granularity. decide uses it."
            ),
            callback=validate.granularity,
        ),
    ] = None,
    real_queries: Annotated[
        Path | None,
        typer.Option(
            "--real-queries",
            help="Real user questions to compare the --queries (e.g. `ragbound synth` output) "
            "with: KS and an exceedance test on their scores, a warning when they differ.",
            callback=validate.existing_file,
        ),
    ] = None,
    null_queries: Annotated[
        Path | None,
        typer.Option(
            "--null-queries",
            help=f"With --statistic {COMBINED} or {AUTO}: in-knowledge questions (real user "
            "questions) that alone make the null; every --queries question (e.g. `ragbound "
            "synth` output) then learns.",
            callback=validate.existing_file,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            help=f"Seed of the learning / conformal split of --statistic {COMBINED} or {AUTO}.",
            callback=validate.seed,
        ),
    ] = 0,
    questions: Annotated[
        str | None,
        typer.Option(
            "--questions",
            help="Where the questions that make the null came from: real or synthetic "
            "(default: read from each record: `ragbound synth` output is synthetic).",
            callback=validate.choice(*DECLARED_ORIGINS),
        ),
    ] = None,
    answerability: Annotated[
        str,
        typer.Option(
            help="The second test: coverage (do the retrieved chunks hold the question's "
            "words? LLM-free), judge (the --llm reads the question and the nearest chunks: "
            "one call per decision) or off. See docs/answerability.md.",
            callback=validate.choice("off", *ANSWERABILITY_STATISTICS),
        ),
    ] = "off",
    json_out: JsonOpt = False,
) -> None:
    """Build the empirical null from in-knowledge queries; save it in KB_DIR/calibration/.

    Each query is retrieved against the knowledge base and its top --k similarities are
    kept (a knowledge base of fewer chunks than the default k: every chunk, with a note).
    decide, evaluate and shift compare new queries with these. Use queries the corpus
    does answer: real user questions, or the output of `ragbound synth`. Calibrating again
    replaces the saved calibration. It is saved while no other process writes the knowledge
    base (waiting up to $RAGBOUND_LOCK_TIMEOUT seconds, 60 by default), and refused if the
    knowledge base changed while it was being calibrated.

    p-values move in steps of 1/(n+1) for n questions, so finding any query out of
    knowledge at alpha = 0.05 needs at least 19 queries, and the share of in-knowledge
    questions flagged stays within +-50% of its mean from one calibration set to another
    only from 79 (m = floor(alpha (n+1)) >= 4 calibration questions at the level; two tests
    sharing alpha need more). Fewer get a warning saying how many would do.

    --statistic and --alpha set what decide, the gate and the service use (decide --alpha
    and serve --alpha change the level); --granularity and --reranker how decide, evaluate,
    shift and the service search (a reranker: about k cross-encoder passes per query).
    --statistic combined learns one score from several signals on half the queries (split
    by --seed), the other half alone making the null, so the p-value stays conformal; auto
    compares the statistics and combined on leave-documents-out queries, proposes the
    simplest within one standard error of the best, or keeps MSS and says why; both search
    with every indexed unit. --null-queries lets every --queries question learn while the
    real questions in FILE alone make the null (docs/online-test.md).

    --answerability adds the answerability test, calibrated on the same questions, the two
    tests sharing --alpha; judge makes one cached LLM call per question and per decision
    (docs/answerability.md). --conversations adds every user turn of every conversation to
    the null, read with --reading; decide, the gate and the service then read conversations
    that way by default (docs/conversations.md).

    The manifest records where the null's questions came from (real, synthetic, mixed or
    unknown: --questions, else each record's source). A null of synthetic questions alone
    gives approximate p-values, which decide, the gate and the service say. --real-queries
    checks that the --queries score like real questions (KS and an exceedance test, each at
    0.025), with a warning on stderr when they differ; without it, synthetic --queries get a
    reminder (docs/online-test.md).

    --json prints path, n_queries, k, tau, statistic, alpha, p_value_method, granularity,
    reranker, critical_value, kb_fingerprint, questions, reading, answerability (with
    level), resolution (n, alpha, level, step, flaggable, attained, spread, needed,
    can_flag, coarse), conversations (with --conversations: source, n_conversations,
    n_turns), synthetic_check (with --real-queries) and selection (with auto).
    """
    from ragbound.conversations.reading import DEFAULT_READING
    from ragbound.corpus import load_queries
    from ragbound.corpus.provenance import question_origins
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase
    from ragbound.synth.check import check_against_real

    learned = statistic in (COMBINED, AUTO)
    _refuse_calibrate_conflicts(
        statistic, null_queries, granularity, reranker, (queries, conversations)
    )
    # the file whose questions make the null: what the real-question check compares
    null_file, null_field = (queries, field) if null_queries is None else (null_queries, None)
    if null_file is None and real_queries is not None:
        raise InputError(
            "--real-queries compares --queries (e.g. `ragbound synth` output) with real "
            "questions: give --queries FILE"
        )
    judge = answerability == "judge"
    chats = _calibration_chats(conversations, reading, None if judge and reading is None else llm)
    reading = (reading or DEFAULT_READING) if chats else None
    kb = KnowledgeBase.load(kb_dir)
    texts = load_queries(queries, field=field) if queries is not None else []
    texts += _read_chats(kb, chats, reading, None if judge and reading != "rewrite" else llm)
    real_texts = load_queries(real_queries) if real_queries else None
    null_texts = load_queries(null_queries) if null_queries else None
    origins = None if null_file is None else question_origins(null_file, field=null_field)
    source = null_queries or ", ".join(str(path) for path in (queries, conversations) if path)
    with warnings_shown():
        guard = Guard.calibrate(
            kb,
            texts,
            k=None if learned else k,  # the learned statistics choose k
            tau=tau if tau == TAU_AUTO else float(tau),
            statistic=statistic,
            alpha=alpha,
            p_value_method=p_value_method,
            reranker=None if reranker is None else str(reranker),
            granularity=granularity,
            null_queries=null_texts,
            seed=seed if learned else None,
            queries_source=str(source),
            progress=progress(json_out),
            questions=questions or origins,  # type: ignore[arg-type]
            answerability=None if answerability == "off" else answerability,
            llm=(llm or "local") if judge else None,
        )
    synthetic_check = None
    if null_file is not None:
        synthetic_check, note = check_against_real(
            guard,
            null_file,
            real_texts,
            field=null_field,
            real_source=str(real_queries or ""),
            progress=progress(json_out),
        )
        if note is not None:
            notice(note)
    guard.record_reading(reading)
    folder = guard.save(on_wait=notice)
    info = _calibration_info(guard, folder, _chats_info(conversations, chats), synthetic_check)
    if json_out:
        emit_json(info)
        return
    _print_calibration(guard, info)


def _refuse_calibrate_conflicts(
    statistic: str,
    null_queries: Path | None,
    granularity: str | None,
    reranker: Path | None,
    questions: tuple[Path | None, Path | None],
) -> None:
    """InputError for options of calibrate that do not go together."""
    learned = statistic in (COMBINED, AUTO)
    if null_queries is not None and not learned:
        raise InputError(
            f"--null-queries needs --statistic {COMBINED} or {AUTO}; for {statistic}, which "
            "learns nothing, calibrate on the real questions: --queries FILE"
        )
    if learned and (granularity is not None or reranker is not None):
        raise InputError(
            f"--statistic {statistic} searches every indexed unit and takes no "
            "--granularity or --reranker"
        )
    if questions == (None, None):
        raise InputError(
            "give in-knowledge questions: --queries FILE, --conversations FILE or both"
        )


def _read_chats(
    kb: KnowledgeBase, chats: Sequence[FileConversation], reading: str | None, llm: str | None
) -> list[str]:
    """The text searched for each user turn of ``chats``, as ``reading`` reads it."""
    if not chats:
        return []
    from ragbound.conversations.turns import read_texts

    assert reading is not None
    items = [chat.conversation for chat in chats]
    return read_texts(kb, items, reading, rewriter_for(reading, llm))


def _calibration_info(
    guard: Guard, folder: Path, chats: dict | None, synthetic_check: SyntheticCheck | None
) -> dict:
    """What calibrate prints with --json."""
    manifest = guard.calibration.manifest
    model = guard.answerability
    answerability = None
    if model is not None:
        level = guard.answerability_level()
        answerability = {"statistic": model.statistic, "depth": model.depth, "level": level}
    info = {
        "path": str(folder),
        "n_queries": manifest.n_queries,
        **guard.config.model_dump(),  # tau as resolved, when it was 'auto'
        "granularity": ",".join(guard.kb.granularity),
        "critical_value": guard.critical_value(),
        "kb_fingerprint": guard.kb.fingerprint,
        "questions": manifest.questions.model_dump(),
        "reading": guard.reading,
        "answerability": answerability,
        "resolution": guard.calibration_resolution().model_dump(),
    }
    if chats is not None:
        info["conversations"] = chats
    if synthetic_check is not None:
        info["synthetic_check"] = synthetic_check.model_dump(mode="json")
    if manifest.selection is not None:
        info["selection"] = manifest.selection.model_dump()
    return info


def _print_calibration(guard: Guard, info: dict) -> None:
    """What calibrate prints without --json: auto's candidates, the calibration in a line,
    its conversations and answerability test, where it was saved and where its null's
    questions came from."""
    manifest = guard.calibration.manifest
    selection = manifest.selection
    if selection is not None:
        console().print(candidate_table(selection))
        say(shown(f"{candidate_basis(selection)}. {selection.reason()}"))
    learners = manifest.n_learning
    alpha = guard.config.alpha
    say(
        f"calibrated on {manifest.n_queries} queries"
        + ("" if not learners else f" ({learners} other queries learned the score)")
        + f" (k={guard.k}, tau={guard.config.tau:g}"
        + ("" if guard.kb.granularity == ("chunk",) else f", {info['granularity']} units")
        + "); "
        f"{guard.config.statistic} critical value at alpha={alpha}: {info['critical_value']:.4f}"
    )
    chats = info.get("conversations")
    if chats is not None:
        n = chats["n_conversations"]
        say(
            f"conversations: {chats['n_turns']} user turns of {n} conversation"
            f"{'s' if n != 1 else ''}, read with {guard.reading} (decide reads conversations "
            "with it)"
        )
    if info["answerability"] is not None:
        level = info["answerability"]["level"]
        say(
            f"answerability test {info['answerability']['statistic']} calibrated on the same "
            f"questions; both tests share alpha={alpha}: each runs at {level:.4g}"
        )
    say(f"saved to {shown(info['path'])}")
    say(questions_line(manifest.questions))


def _calibration_chats(
    conversations: Path | None, reading: str | None, llm: str | None
) -> list[FileConversation]:
    """Every user turn of each conversation of ``conversations`` (none without the file)."""
    if conversations is None:
        if reading is not None or llm is not None:
            raise InputError(
                "--reading and --llm read conversations: give --conversations FILE (--llm "
                "also judges with --answerability judge)"
            )
        return []
    from ragbound.conversations.files import load_conversations

    return load_conversations(conversations, every_turn=True)


def _chats_info(conversations: Path | None, chats: Sequence[FileConversation]) -> dict | None:
    """What a calibration read of a conversation file, for --json and the summary line (None:
    no conversations)."""
    if not chats:
        return None
    return {
        "source": str(conversations),
        "n_conversations": len({(chat.file, chat.line) for chat in chats}),
        "n_turns": len(chats),
    }


def questions_line(null: NullQuestions) -> str:
    """One line on the null's questions; for synthetic ones alone, that p-values are only
    approximate and what to do."""
    line = f"null: {null.describe()}"
    if null.approximate:
        return (
            f"[yellow]{line}: {APPROXIMATE}[/]; add a few dozen real questions (calibrate on "
            f"them, or --null-queries REAL_FILE with --statistic {AUTO})"
        )
    if null.origin == "unknown":
        return f"{line}; --questions real|synthetic records where they came from"
    return line


def candidate_table(selection: Selection, shown: int = 12) -> Table:
    """The best ``shown`` candidates auto compared, and the picked one wherever it ranks (all
    of them are in --json)."""
    from rich.table import Table

    table = Table(
        title=f"--statistic auto: best {min(shown, len(selection.candidates))} "
        f"of {len(selection.candidates)}"
    )
    for column in ("candidate", "flagged", "AUROC"):
        table.add_column(column, justify="right")
    rows = list(selection.candidates[:shown])
    rows += [c for c in (selection.proposed, selection.picked) if c not in rows]
    for candidate in rows:
        mark = " (picked)" if candidate == selection.picked else ""
        if candidate == selection.proposed and candidate != selection.picked:
            mark = " (proposed)"
        table.add_row(candidate.label + mark, f"{candidate.flagged:.3f}", f"{candidate.auroc:.3f}")
    return table


def candidate_basis(selection: Selection) -> str:
    """What the candidates of ``candidate_table`` were ranked on."""
    return (
        f"Candidates ranked on {selection.n_learning_masked} of {selection.n_learning} "
        f"learning queries left out, {selection.n_groups} groups (alpha={selection.alpha})"
    )


APPROXIMATE_LINE = (
    f"[yellow]{APPROXIMATE}[/] (the calibration's questions were all written by an LLM): "
    "calibrate on a few dozen real ones"
)
# load_queries and load_conversations name what a record lacks, and the fields it has: a
# file of the other kind says so in these words
_CONVERSATION_FIELDS = re.compile(r"fields present: (.*, )?(messages|turns)(,|$)")
_NOT_A_CONVERSATION = ("(field 'messages' or 'turns'): missing", "got a line of plain text")


def decide(
    kb_dir: CalibratedKbArg,
    query: QueriesArg = None,
    queries: QueriesFileOpt = None,
    field: FieldOpt = None,
    conversations: ConversationsOpt = None,
    every_turn: Annotated[
        bool,
        typer.Option(
            "--every-turn",
            help="Decide every user turn of each conversation, not only its last (a logged chat).",
        ),
    ] = False,
    reading: ReadingOpt = None,
    llm: RewriteLlmOpt = None,
    alpha: DecisionAlphaOpt = None,
    evidence: Annotated[
        int,
        typer.Option(
            help="Nearest chunks to show per decision.", callback=validate.non_negative_int
        ),
    ] = 3,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Decide queries or conversations as the gate and the service do: answer, abstain or
    reject.

    Queries come as arguments, from --queries FILE, or both; conversations from
    --conversations FILE (one a line, OpenAI-style or doc2dial's: docs/conversations.md),
    each decided at its last user turn, or at every user turn with --every-turn (a logged
    chat, which may end with the assistant's answer). Give queries or conversations, not
    both: a file of the other kind is refused, saying which option takes it.

    Each query (a conversation: the text its turn is read into, with --reading) is retrieved
    and its statistic (the calibration's; higher = more out of knowledge) is compared with
    the calibration queries' values: p = (1 + the number of calibration queries scoring at
    least as high) / (n + 1), out of knowledge when p <= alpha. The tripwires (every user
    turn of a conversation meets them) and, when calibrated, the answerability test decide
    too: reject a forbidden query, abstain on one out of knowledge or unanswerable, else
    answer.

    Each decision is printed in 80 columns: the query whole (a conversation's under a line
    naming it and the user turn, 1: the first), its p-value, verdict and nearest chunk
    (similarity and source); the answerability test's line; the topics of a forbidden query.
    --json prints one decision per line: query, action, cause, reason, test (query (the text
    searched), statistic, score, p_value, out_of_knowledge, alpha, critical_value (null when
    no score can reach alpha with this calibration), k, n_calibration, approximate (true
    when the calibration's questions are all synthetic)), answerability, tripwires,
    neighbours (--evidence chunks: rank, chunk_id, doc_id, source, similarity, text) and,
    for a conversation, conversation (turn, history, id, reading, read_turns). A calibration
    made before the knowledge base changed, or with another search, is refused unless
    --force.
    """
    from ragbound.gate import Gate

    items, chats = _decided_items(query, queries, field, conversations, every_turn, reading, llm)
    gate = Gate.load(kb_dir, force=force, context_k=evidence, reading=reading)
    _use_alpha(gate, alpha)
    if chats is not None:
        gate.rewriter = rewriter_for(gate.reading, llm)
        _warn_when_read_otherwise(gate)
    decisions = _decide_in_batches(gate, items, progress(json_out))
    if json_out:
        for decision in decisions:
            emit_json(decision)
        return
    shared = gate.guard.answerability is not None
    print_decisions(decisions, chats, gate.reading if chats else None, shared=shared)
    if gate.guard.approximate:
        say(APPROXIMATE_LINE)


def _decided_items(
    query: list[str] | None,
    queries: Path | None,
    field: str | None,
    conversations: Path | None,
    every_turn: bool,
    reading: str | None,
    llm: str | None,
) -> tuple[list[str] | list[Conversation], list[FileConversation] | None]:
    """What ``decide`` decides: the queries, or the conversations and the file's chats
    (None for queries); InputError for options that do not go together."""
    if conversations is None:
        if every_turn or reading is not None or llm is not None:
            raise InputError(
                "--every-turn, --reading and --llm read conversations: give --conversations FILE"
            )
        if not query and queries is None:
            raise InputError("give queries as arguments, --queries FILE or --conversations FILE")
        return _queries(query, queries, field), None
    if query or queries is not None:
        raise InputError("give queries or --conversations FILE, not both (decide them apart)")
    if field is not None:
        raise InputError("--field names the query field of --queries FILE, not of conversations")
    chats = _conversations(conversations, every_turn)
    return [chat.conversation for chat in chats], chats


def _queries(query: list[str] | None, queries: Path | None, field: str | None) -> list[str]:
    """The queries given; a --queries file of conversations is refused, saying so."""
    try:
        return gather_queries(query, queries, field)
    except InputError as exc:
        if field is not None or not _CONVERSATION_FIELDS.search(str(exc)):
            raise
        raise InputError(f"{exc}; a file of conversations: give it with --conversations") from None


def _conversations(conversations: Path, every_turn: bool) -> list[FileConversation]:
    """The chats of a --conversations file; one of queries is refused, saying so, and a
    logged chat (ending with the assistant's turn) is pointed to --every-turn."""
    from ragbound.conversations.files import load_conversations

    try:
        return load_conversations(conversations, every_turn=every_turn)
    except InputError as exc:
        if any(words in str(exc) for words in _NOT_A_CONVERSATION):
            raise InputError(f"{exc}; a file of queries: give it with --queries") from None
        if every_turn or "the last message is the assistant's" not in str(exc):
            raise
        raise InputError(f"{exc}; --every-turn decides every user turn of a logged chat") from None


def _use_alpha(gate: Gate, alpha: float | None) -> None:
    """Decide at ``alpha`` (None: the calibration's), with a warning when the calibration is
    too small for it."""
    if alpha is None:
        return
    gate.guard.use_alpha(alpha)
    message = gate.guard.calibration_resolution().message()
    if message is not None:
        notice(wrap(f"warning: {message}"))


def _warn_when_read_otherwise(gate: Gate) -> None:
    """A warning when conversations are read other than as the calibration's were."""
    made_with = gate.guard.reading
    if made_with is not None and made_with != gate.reading:
        notice(
            wrap(
                f"warning: this calibration's conversations were read with {made_with}; "
                f"deciding with {gate.reading} holds turns read another way to that null "
                "(their p-values may not hold)"
            )
        )


def _decide_in_batches(
    gate: Gate, items: Sequence[str | Conversation], show_progress: bool
) -> list[Decision]:
    """The gate's decisions on ``items``, a search batch at a time, with a progress bar."""
    from ragbound.knowledge.query import SEARCH_BATCH
    from ragbound.progress import progress_bar

    decisions: list[Decision] = []
    with progress_bar(len(items), "deciding", show_progress) as advance:
        for start in range(0, len(items), SEARCH_BATCH):
            part = items[start : start + SEARCH_BATCH]
            decisions += gate.decide_many(part)
            advance(len(part))
    return decisions


def evaluate(
    kb_dir: CalibratedKbArg,
    in_knowledge: Annotated[
        Path,
        typer.Option(
            "--in-knowledge",
            help="In-knowledge queries held out from calibration.",
            callback=validate.existing_file,
        ),
    ],
    out_of_knowledge: Annotated[
        Path,
        typer.Option(
            "--out-of-knowledge",
            help="Out-of-knowledge queries: ones the corpus does not answer.",
            callback=validate.existing_file,
        ),
    ],
    field: FieldOpt = None,
    samples: Annotated[
        int, typer.Option(help="Queries drawn per side per run.", callback=validate.positive_int)
    ] = 300,
    runs: Annotated[
        int, typer.Option(help="Random draws to average.", callback=validate.positive_int)
    ] = 10,
    seed: SeedOpt = 0,
    run: RunOpt = None,
    plot: PlotOpt = None,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """AUROC, AUPRC, TPR at 5% FPR and DER for every statistic (paper protocol).

    Each of --runs draws takes --samples in-knowledge and --samples out-of-knowledge
    queries (seeded, without replacement; all of a file holding fewer, with a warning); the
    metrics are averaged over the draws. When both files hold fewer, every draw would be the
    same sample, so one run is made. TPR and DER (detection error rate: wrong decisions / all
    queries) use the critical value calibrated at alpha = 0.05. In-knowledge queries that are
    also calibration queries are refused: hold them out from calibrate.

    --json prints one object: statistics (per statistic: auroc, auprc, tpr_at_5_fpr and der,
    their standard deviations auroc_std and so on, fpr and tpr_at_5_fpr_oracle), n_in_knowledge,
    n_out_of_knowledge, n_calibration, samples (asked), drawn_in and drawn_out (queries in
    each draw), runs (made), seed, alpha, k, kb_fingerprint and default_statistic (the one
    calibrate uses unless told otherwise).
    --run records the per-query values for `ragbound report` (histograms, ROC curves) and
    the inputs: the knowledge base and its corpus, the question files, the embedder, the time.
    """
    from ragbound.corpus import load_queries
    from ragbound.detect import Guard
    from ragbound.detect.evaluate import evaluate as run_evaluation
    from ragbound.detect.evaluate import evaluation_inputs, statistic_scores

    guard = Guard.load(kb_dir, force=force)
    ik = load_queries(in_knowledge, field=field)
    ook = load_queries(out_of_knowledge, field=field)
    scored = statistic_scores(guard, ik, ook, progress=progress(json_out))
    report = run_evaluation(guard, ik, ook, samples=samples, runs=runs, seed=seed, scored=scored)
    sizes = {in_knowledge: len(ik), out_of_knowledge: len(ook)}
    _warn_when_smaller_than_samples(sizes, samples, runs)  # once the queries are known good
    if run or plot:
        from ragbound.report import RunData, record_evaluation
        from ragbound.report.run import score_lists

        if run:
            inputs = evaluation_inputs(guard, in_knowledge, out_of_knowledge)
            record_evaluation(run, report, scored, inputs)
        if plot:
            write_plots(RunData(path=plot, evaluation=report, scores=score_lists(scored)), plot)
    if json_out:
        emit_json(report)
        return
    console().print(evaluation_table(report))


def _warn_when_smaller_than_samples(sizes: dict[Path, int], samples: int, runs: int) -> None:
    """One warning line when a query file holds fewer queries than --samples asks for."""
    small = {path: n for path, n in sizes.items() if n < samples}
    if not small:
        return
    files = " and ".join(f"{path} ({n} queries)" for path, n in small.items())
    verb = "holds" if len(small) == 1 else "hold"
    if any(n > samples for n in sizes.values()):
        what = "each draw takes all of them"
    else:  # every draw would be the same sample
        what = "every draw takes every query, so one run is made" + (
            f" instead of {runs}" if runs > 1 else ""
        )
    notice(f"warning: {files} {verb} fewer than --samples {samples}; {what}")


def answerability_line(answer: AnswerabilityVerdict) -> str:
    """The line under an in-knowledge verdict: the answerability test's p-value, answerable
    or not, the share of the question the best retrieved sentence holds and, when
    unanswerable, the question's rarest words no retrieved chunk holds."""
    label = "[red]unanswerable[/]" if answer.unanswerable else "[green]answerable[/]  "
    chance = answer.evidence.answer_probability
    held = (
        f"  best sentence holds {answer.evidence.coverage:.0%}"
        if chance is None
        else f"  judge: answer in the chunks with probability {chance:.2f}"
    )
    missing = ", ".join(answer.evidence.missing)
    lacking = f"; missing: {shown(missing)}" if answer.unanswerable and missing else ""
    return f"    p-value {answer.p_value:.4f}  {label}{held}{lacking}"


def verdict_line(verdict: Verdict, neighbours: Sequence[Neighbour]) -> str:
    """The indented line under a query: p-value, in or out of knowledge, nearest chunk."""
    out = verdict.out_of_knowledge
    label = "[red]out of knowledge[/]" if out else "[green]in knowledge[/]    "
    near = neighbours[0] if neighbours else None
    evidence = f"  nearest {near.similarity:.3f} {shown(near.source)}" if near else ""
    return f"    p-value {verdict.p_value:.4f}  {label}{evidence}"


def print_decisions(
    decisions: Sequence[Decision],
    chats: Sequence[FileConversation] | None,
    reading: str | None,
    *,
    shared: bool = False,
) -> None:
    """Each decision in lines of at most 80 columns, as decide's help says; a conversation's
    (``chats``, read with ``reading``) under its :func:`turn_line`. ``shared``: the tests
    share alpha."""
    from ragbound.gate import fired_topics

    first = decisions[0].test
    both = " (shared with the answerability test)" if shared else ""
    read = "" if reading is None else f"; conversations read with {reading}"
    say(
        f"{first.statistic}, alpha={first.alpha:.4g}{both}, k={first.k}, "
        f"{first.n_calibration} calibration queries{read}"
    )
    for i, decision in enumerate(decisions):
        if chats is not None:
            say(shown(turn_line(decision, chats[i])))
        say(shown(decision.query))
        if decision.test.query != decision.query and _rewritten(decision):
            say(shown(f"    rewritten: {decision.test.query}"))
        show(verdict_line(decision.test, decision.neighbours))
        if decision.answerability is not None:
            show(answerability_line(decision.answerability))
        if decision.action == "reject":
            say(shown(f"    forbidden: {', '.join(fired_topics(decision))}"))


def turn_line(decision: Decision, chat: FileConversation) -> str:
    """The line naming a conversation's decided turn, and the user turns its text joins."""
    turn = decision.conversation
    assert turn is not None
    joined = not _rewritten(decision) and turn.read_turns > 1
    how = f", searched with the last {turn.read_turns} user turns" if joined else ""
    return f"{chat.label}, user turn {turn.turn + 1}{how}:"


def _rewritten(decision: Decision) -> bool:
    from ragbound.conversations.reading import REWRITE

    return decision.conversation is not None and decision.conversation.reading == REWRITE


def evaluation_table(report: EvaluationReport) -> Table:
    """Metrics per statistic, as in the paper's tables."""
    from rich.table import Table

    table = Table(
        title=f"{report.draws()}, alpha={report.alpha}, k={report.k}, "
        f"{report.n_calibration} calibration queries"
    )
    for column in ("statistic", "AUROC", "AUPRC", "TPR@5%FPR", "DER", "real FPR", "oracle TPR"):
        table.add_column(column, justify="right")
    for name in report.ordered():
        m = report.statistics[name]
        table.add_row(
            report.label(name),
            f"{m.auroc:.4f}",
            f"{m.auprc:.4f}",
            f"{m.tpr_at_5_fpr:.4f}",
            f"{m.der:.4f}",
            f"{m.fpr:.4f}",
            f"{m.tpr_at_5_fpr_oracle:.4f}",
        )
    return table


def register(app: typer.Typer) -> None:
    """Add ``calibrate``, ``decide`` and ``evaluate`` to ``app``."""
    app.command("calibrate")(calibrate)
    app.command("decide")(decide)
    app.command("evaluate")(evaluate)
