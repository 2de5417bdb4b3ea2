"""The combined statistic and calibrate --statistic auto on the packaged sample corpus; a
combined calibration works wherever a calibration is used (gate, shift, monitor, log scoring,
the real-question check), and the Ray engine is refused for it with a clear message."""

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.corpus.chunker import split_sentences
from ragbound.corpus.units import unit_params
from ragbound.demo import sample_corpus
from ragbound.detect import Guard
from ragbound.detect.combined import (
    Candidate,
    QueryFeatures,
    corpus_words,
    feature_depth,
    learn,
    lexical_candidates,
)
from ragbound.detect.config import DEFAULTS
from ragbound.detect.evaluate import split_queries
from ragbound.detect.logscore import score_file
from ragbound.detect.monitor import ShiftMonitor, WindowSpec
from ragbound.detect.select import LEARN_SHARE, complexity, pick_candidate
from ragbound.detect.shift import shift_test
from ragbound.engines import make_search
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import auroc_standard_error
from ragbound.stores.lexical import word_tokens
from ragbound.synth.check import compare_with_real


def _lines(name: str) -> list[str]:
    return (sample_corpus() / name).read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    out = tmp_path_factory.mktemp("combined") / "kb"
    units = unit_params("chunk,sentence", 3)
    KnowledgeBase.build([sample_corpus() / "docs"], embedder="minilm", units=units).save(out)
    return KnowledgeBase.load(out)


@pytest.fixture(scope="module")
def combined(kb: KnowledgeBase) -> Guard:
    return Guard.calibrate(kb, _lines("in_knowledge.txt"), DEFAULTS, statistic="combined")


def test_the_null_is_the_conformal_half_scored_with_the_full_index(
    kb: KnowledgeBase, combined: Guard
):
    queries = _lines("in_knowledge.txt")
    learning, conformal = split_queries(queries, LEARN_SHARE, seed=0)
    model = combined.calibration.manifest.combined
    assert model is not None
    assert combined.calibration.queries == conformal  # the learning half never enters it
    assert not set(learning) & set(combined.calibration.queries)
    scores, _ = model.scores(kb, conformal)
    np.testing.assert_allclose(np.sort(scores), model.null().scores)
    assert model.n_learning == len(learning) and model.null().n == len(conformal)


def test_the_model_is_learned_from_the_learning_half_alone(kb: KnowledgeBase, combined: Guard):
    learning, _ = split_queries(_lines("in_knowledge.txt"), LEARN_SHARE, seed=0)
    alone = learn(QueryFeatures(kb, learning, feature_depth(kb), masked=True))
    model = combined.calibration.manifest.combined
    assert model is not None
    np.testing.assert_allclose(model.coef, alone.coef)
    assert "hybrid_overlap" in model.names and "sentence.top1" in model.names


def test_combined_separates_and_round_trips_as_plain_json(kb: KnowledgeBase, combined: Guard):
    combined.save()
    manifest = json.loads((kb.path / "calibration" / "manifest.json").read_text())
    assert manifest["detector"]["statistic"] == "combined"
    assert {"names", "coef", "mean", "scale", "null_scores"} <= manifest["combined"].keys()
    again = Guard.load(kb.path)
    outside = _lines("out_of_knowledge.txt")[:20]
    verdicts = again.check_many(outside)
    first = combined.check_many(outside)
    assert [v.p_value for v in verdicts] == [v.p_value for v in first]
    assert verdicts[0].statistic == "combined" and verdicts[0].neighbours
    inside = again.check_many(_lines("in_knowledge.txt")[:20])
    assert np.mean([v.score for v in verdicts]) > np.mean([v.score for v in inside])
    assert sum(v.out_of_knowledge for v in verdicts) > sum(v.out_of_knowledge for v in inside)
    with pytest.raises(InputError, match="combined statistic has no similarity detector"):
        again.detector()
    assert again.check("What is BM25?", statistic="mss").statistic == "mss"


@pytest.mark.parametrize("overlap", ["overlap", "idf_overlap"])
def test_an_older_calibration_is_refused(kb: KnowledgeBase, combined: Guard, overlap: str):
    """Calibrations from before the hybrid candidates (an unweighted or IDF-weighted overlap
    of the embedder's candidates alone, no document gap, no sentence overlap)."""
    model = combined.calibration.manifest.combined
    assert model is not None
    names = [n for n in model.names if n not in ("document_gap", "sentence_overlap")]
    old = model.model_copy(
        update={"names": tuple(overlap if n == "hybrid_overlap" else n for n in names)}
    )
    with pytest.raises(InputError, match="older ragbound made the calibration; calibrate again"):
        old.scores(kb, ["What is BM25?"])


def test_word_weights_favour_rare_words_and_overlap_reads_them(kb: KnowledgeBase):
    idf = corpus_words(kb).weight
    holding = [sum(w in c.text.lower() for c in kb.chunks) for w in ("ragbound", "conformal")]
    assert holding[0] > holding[1] > 0  # the product name is everywhere, "conformal" rarer
    assert idf("ragbound") < idf("conformal") < idf("zyzzyva")
    assert corpus_words(kb) is corpus_words(kb)  # one tokenization per corpus
    found = QueryFeatures(kb, ["conformal p-value calibration", "zyzzyva zyzzyva"], 4)
    overlap = found.features["hybrid_overlap"]
    assert 0 < overlap[0] <= 1 and overlap[1] == 0


def test_threads_asking_at_once_share_one_corpus_index(kb: KnowledgeBase, monkeypatch):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ragbound.detect import combined as module

    built = []
    start = threading.Barrier(6)

    class CountingStore(module.BM25Store):
        def __init__(self, texts):
            built.append(1)
            super().__init__(texts)

    def ask(_: int):
        start.wait()  # all six ask together
        return corpus_words(kb)

    monkeypatch.setattr(module, "BM25Store", CountingStore)
    monkeypatch.setattr(module, "_CORPORA", {})
    with ThreadPoolExecutor(6) as pool:
        found = list(pool.map(ask, range(6)))
    assert len(built) == 1 and all(f is found[0] for f in found)


def test_chunk_words_are_the_chunks_tokens_kept_up_to_the_bound(kb: KnowledgeBase, monkeypatch):
    from ragbound.detect import combined as module

    monkeypatch.setattr(module, "TOKENIZED_CHUNKS", 3)
    corpus = module.CorpusWords(corpus_words(kb).index, corpus_words(kb).idf, 1.0)
    texts: list[int] = []

    def text(row: int) -> str:  # records which chunks were tokenized
        texts.append(row)
        return kb.chunks[row].text

    found = corpus.chunk_words([0, 1, 2, 3, 1], text)
    assert texts == [0, 1, 2, 3] and found[1] is found[4]  # each tokenized once
    assert list(corpus._chunks) == [1, 2, 3]  # the oldest left at the bound
    names = {i: w for w, i in corpus.index.vocab.items()}
    words = {names[int(i)] for i in found[3].words}
    assert words == set(word_tokens([kb.chunks[3].text])[0])
    sentences = split_sentences(kb.chunks[3].text)
    assert found[3].n_sentences == len(sentences)
    first = {names[int(i)] for i in found[3].sentence_words[found[3].sentence_of == 0]}
    assert first == set(word_tokens([sentences[0]])[0])
    corpus.chunk_words([0], text)
    assert texts[-1] == 0 and list(corpus._chunks) == [2, 3, 0]


def test_threads_reading_chunk_words_at_once_get_each_chunks_own(kb: KnowledgeBase, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from ragbound.detect import combined as module

    monkeypatch.setattr(module, "TOKENIZED_CHUNKS", 4)
    corpus = module.CorpusWords(corpus_words(kb).index, corpus_words(kb).idf, 1.0)
    alone = module.CorpusWords(corpus.index, corpus.idf, 1.0)
    rows = [[(i + j) % len(kb) for j in range(5)] for i in range(24)]
    with ThreadPoolExecutor(6) as pool:
        found = list(pool.map(lambda r: corpus.chunk_words(r, lambda c: kb.chunks[c].text), rows))
    assert len(corpus._chunks) <= 4
    for wanted, got in zip(rows, found, strict=True):
        expected = alone._tokenize([kb.chunks[r].text for r in wanted])
        assert all(np.array_equal(g.words, e.words) for g, e in zip(got, expected, strict=True))


def test_lexical_candidates_find_rare_words_and_leave_out_masked_rows(kb: KnowledgeBase):
    rows = lexical_candidates(kb, ["conformal"], 4)[0]
    assert len(rows) == 4 and "conformal" in kb.chunks[int(rows[0])].text.lower()
    masked = lexical_candidates(kb, ["conformal"], 4, [rows[:2]])[0]
    assert len(masked) == 4 and not set(masked.tolist()) & set(rows[:2].tolist())
    assert masked[:2].tolist() == rows[2:].tolist()  # the rest keep their order


def test_sentence_overlap_reads_one_sentence_and_the_gap_is_not_negative(kb: KnowledgeBase):
    sentence = split_sentences(kb.chunks[3].text)[1]
    queries = [sentence, *_lines("in_knowledge.txt")[:6], *_lines("out_of_knowledge.txt")[:6]]
    found = QueryFeatures(kb, queries, 4)
    chunk, within = found.features["hybrid_overlap"], found.features["sentence_overlap"]
    # a sentence of the corpus: every word in one sentence
    np.testing.assert_allclose([chunk[0], within[0]], 1.0)
    assert np.all(within <= chunk + 1e-12)  # a sentence holds no more than its chunk
    assert np.all(found.features["document_gap"] >= 0)


def test_query_similarity_leaves_out_the_row_itself_and_its_masked_documents(
    kb: KnowledgeBase,
):
    twin = "How does ragbound calibrate the p-value?"
    others = _lines("in_knowledge.txt")[:7]
    learning = QueryFeatures(kb, [twin, twin, *others], 4, masked=True)
    full = learning.features["query_similarity"]
    # each twin's nearest other learning query is the other twin, itself left out
    np.testing.assert_allclose(full[:2], 1.0, atol=1e-5)
    assert np.all(full[2:] < 1.0 - 1e-4)
    # masked, the other twin is about a masked document (the same nearest chunk): left out
    masked = dict(
        zip(learning.masked_rows, learning.masked_features["query_similarity"], strict=True)
    )
    assert 0 in masked and masked[0] < 1.0 - 1e-4
    # a new query compares with every learning query
    new = QueryFeatures(kb, [twin], 4, references=learning.references)
    np.testing.assert_allclose(new.features["query_similarity"], 1.0, atol=1e-5)
    assert "query_similarity" not in QueryFeatures(kb, [twin], 4).features


def test_a_lexical_knowledge_base_learns_without_query_similarity():
    lexical = KnowledgeBase.build([sample_corpus() / "docs"], embedder="bm25")
    guard = Guard.calibrate(lexical, _lines("in_knowledge.txt"), DEFAULTS, statistic="combined")
    model = guard.calibration.manifest.combined
    assert model is not None and model.reference_queries == ()
    assert "query_similarity" not in model.names and "hybrid_overlap" in model.names
    inside = guard.check_many(_lines("in_knowledge.txt")[:20])
    outside = guard.check_many(_lines("out_of_knowledge.txt")[:20])
    assert np.mean([v.score for v in outside]) > np.mean([v.score for v in inside])


def test_auto_records_its_candidates_and_check_uses_the_pick(kb: KnowledgeBase):
    guard = Guard.calibrate(kb, _lines("in_knowledge.txt"), DEFAULTS, statistic="auto")
    selection = guard.calibration.manifest.selection
    assert selection is not None and selection.tolerance > 0
    best, proposed = selection.candidates[0], selection.proposed
    assert proposed is not None and proposed.auroc >= best.auroc - selection.tolerance
    simpler = [c for c in selection.candidates if complexity(c) < complexity(proposed)]
    assert all(c.auroc < best.auroc - selection.tolerance for c in simpler)
    # 17 documents: too few to tell candidates apart, so the default (MSS at the knowledge
    # base's granularity) is kept, and the selection says why
    assert selection.n_groups == 17
    assert selection.picked == selection.default
    assert selection.default.label == "chunk,sentence mss"
    assert selection.kept_default_because.startswith("only 17 groups left out")
    keys = [(-c.auroc, -c.flagged) for c in selection.candidates]
    assert keys == sorted(keys)
    labels = {c.label for c in selection.candidates}
    assert {"combined", "chunk mss", "sentence energy k=8", "chunk,sentence simes k=8"} <= labels
    assert not any(c.statistic == "entropy" for c in selection.candidates)  # not monotone
    verdict = guard.check("Who painted the Mona Lisa?")
    assert verdict.statistic == selection.picked.statistic
    assert guard.config.statistic == selection.picked.statistic
    assert ",".join(guard.kb.granularity) == selection.picked.granularity


def candidate(statistic: str, granularity: str, auc: float, k: int = 1) -> Candidate:
    return Candidate(statistic=statistic, k=k, granularity=granularity, auroc=auc, flagged=0.5)


def test_auto_picks_the_simplest_candidate_within_one_standard_error():
    ranked = [
        candidate("combined", "chunk,sentence", 0.966),
        candidate("mss", "chunk,sentence", 0.965),
        candidate("energy", "chunk", 0.963, k=4),
        candidate("mss", "chunk", 0.962),
        candidate("mss", "sentence", 0.950),
    ]
    # SE of 0.966 from 125 + 125 queries (Hanley-McNeil) is about 0.012: all but the last
    # are within it, and chunk mss is the simplest of them
    picked, tolerance = pick_candidate(ranked, 125, 125)
    assert tolerance == pytest.approx(auroc_standard_error(0.966, 125, 125))
    assert picked.label == "chunk mss"
    # a clear winner is kept: combined 0.93 against 0.87 with 172 + 172 queries
    clear = [candidate("combined", "chunk,sentence", 0.93), candidate("mss", "chunk", 0.87)]
    assert pick_candidate(clear, 172, 172)[0].statistic == "combined"
    # within the tolerance, fewer granularities before a simpler statistic
    mixed = [candidate("mss", "chunk,sentence", 0.9), candidate("energy", "sentence", 0.899, 4)]
    assert pick_candidate(mixed, 100, 100)[0].label == "sentence energy k=4"


def test_learned_calibration_refuses_too_few_queries_and_what_it_chooses(kb: KnowledgeBase):
    queries = _lines("in_knowledge.txt")
    with pytest.raises(InputError, match="at least 4 queries to learn from and 2"):
        Guard.calibrate(kb, queries[:5], DEFAULTS, statistic="auto")
    with pytest.raises(InputError, match="got 12 and 1"):
        Guard.calibrate(kb, queries[1:13], statistic="combined", null_queries=queries[:1])
    config = DEFAULTS.updated(reranker=str(Path("somewhere")))
    with pytest.raises(InputError, match=r"statistic combined .* takes no reranker$"):
        Guard.calibrate(kb, queries, config, statistic="combined")
    with pytest.raises(InputError, match=r"statistic auto .* takes no k or granularity$"):
        Guard.calibrate(kb, queries, statistic="auto", k=8, granularity="sentence")
    with pytest.raises(InputError, match="seed: Input should be greater than or equal to 0"):
        Guard.calibrate(kb, queries, statistic="combined", seed=-1)
    with pytest.raises(InputError, match="null_queries must be a list of questions"):
        Guard.calibrate(kb, queries, statistic="combined", null_queries=queries[0])
    with pytest.raises(InputError, match="statistic: unknown statistic 'autoo'"):
        Guard.calibrate(kb, queries, statistic="autoo")
    with pytest.raises(InputError, match="alpha: Input should be less than 1"):
        Guard.calibrate(kb, queries, statistic="auto", alpha=1.5)
    with pytest.raises(InputError, match="Extra inputs are not permitted"):
        Guard.calibrate(kb, queries, statistic="auto", nul_queries=queries)


def test_the_seed_and_a_config_holding_combined_reach_the_learned_calibration(
    kb: KnowledgeBase, combined: Guard
):
    queries = _lines("in_knowledge.txt")
    again = Guard.calibrate(kb, queries, DEFAULTS.updated(statistic="combined"))
    assert again.calibration.queries == combined.calibration.queries
    np.testing.assert_allclose(again.null_scores(), combined.null_scores())
    other = Guard.calibrate(kb, queries, statistic="combined", seed=3, alpha=0.1)
    assert other.calibration.queries == split_queries(queries, LEARN_SHARE, seed=3)[1]
    assert other.config.alpha == 0.1 and other.config.statistic == "combined"


def test_null_queries_make_the_null_and_every_query_learns(kb: KnowledgeBase):
    queries = _lines("in_knowledge.txt")
    learning, nulls = queries[: len(queries) // 2], queries[len(queries) // 2 :]
    guard = Guard.calibrate(kb, learning, DEFAULTS, statistic="combined", null_queries=nulls)
    model = guard.calibration.manifest.combined
    assert model is not None and guard.calibration.queries == nulls
    assert model.n_learning == len(learning) and model.reference_queries == tuple(learning)
    assert guard.calibration.manifest.n_learning == len(learning)  # what calibrate prints
    alone = learn(QueryFeatures(kb, learning, feature_depth(kb), masked=True))
    np.testing.assert_allclose(model.coef, alone.coef)
    scores, _ = model.scores(kb, nulls)
    np.testing.assert_allclose(np.sort(scores), model.null().scores)


def test_a_query_in_both_parts_leaves_the_learning_with_a_warning(kb: KnowledgeBase):
    queries = _lines("in_knowledge.txt")
    nulls = queries[len(queries) // 2 :]
    respaced = [f"  {nulls[0].upper()} ", nulls[1].replace(" ", "  ")]  # the same questions
    with pytest.warns(UserWarning, match="2 of the learning queries are also null queries") as seen:
        guard = Guard.calibrate(
            kb,
            queries[: len(queries) // 2] + respaced,
            DEFAULTS,
            statistic="auto",
            null_queries=nulls,
        )
    assert seen[0].filename == __file__  # the warning names the caller's line
    selection = guard.calibration.manifest.selection
    assert selection is not None and selection.n_learning == len(queries) // 2
    assert guard.calibration.manifest.n_learning == len(queries) // 2  # auto ranked on them
    assert guard.calibration.queries == nulls


# ------------------------------------------- wherever a calibration is used
def test_the_gate_decides_with_the_combined_p_values(combined: Guard):
    queries = _lines("out_of_knowledge.txt")[:5] + _lines("in_knowledge.txt")[:5]
    decisions = Gate(combined).decide_many(queries)
    verdicts = combined.check_many(queries)
    assert [d.test.p_value for d in decisions] == [v.p_value for v in verdicts]
    assert {d.test.statistic for d in decisions} == {"combined"}
    assert [d.test.out_of_knowledge for d in decisions] == [v.out_of_knowledge for v in verdicts]
    assert all(d.neighbours for d in decisions)


def _count_calls(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the real embedder's calls and the searches of the knowledge base's own store."""
    calls = {"embed": 0, "search": 0}

    def counting(obj: object, name: str, key: str) -> None:
        real = getattr(obj, name)

        def wrapper(*args, **kwargs):
            calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(obj, name, wrapper)

    counting(kb.embedder, "encode", "embed")
    counting(kb.embedder, "encode_one", "embed")
    counting(kb.store, "search", "search")
    return calls


def test_the_gate_embeds_and_searches_a_combined_query_once(
    combined: Guard, monkeypatch: pytest.MonkeyPatch
):
    gate = Gate(combined)
    queries = _lines("out_of_knowledge.txt")[:3] + _lines("in_knowledge.txt")[:3]
    gate.decide(queries[0])  # the learning queries' vectors are embedded once, up front
    calls = _count_calls(combined.kb, monkeypatch)
    gate.decide(queries[1])
    assert calls == {"embed": 1, "search": 1}
    calls.update(embed=0, search=0)
    gate.decide_many(queries)
    assert calls == {"embed": 1, "search": 1}


def test_one_search_gives_the_decisions_of_two(combined: Guard):
    """The p-values (to the float) of the combined statistic searching by itself, and the
    neighbours of a search at the gate's own depth, as before the gate shared its search."""
    gate = Gate(combined, context_k=3)
    queries = _lines("out_of_knowledge.txt")[:4] + _lines("in_knowledge.txt")[:4]
    # one query alone (its embedder's single-query path), then the batch embedded together
    batches = [[q] for q in queries] + [queries]
    for batch in batches:
        decisions = gate.decide_many(batch)
        alone = combined.score(batch)  # embeds and searches every view itself
        assert [d.test.p_value for d in decisions] == alone.p_values.tolist()
        assert [d.test.score for d in decisions] == alone.scores.tolist()
        shallow = combined.kb.search(batch, 3)
        for i, decision in enumerate(decisions):
            assert [c.chunk_id for c in decision.neighbours] == [
                combined.kb.chunk_at(row).id for row in shallow.indices[i]
            ]
            assert [c.similarity for c in decision.neighbours] == shallow.similarities[i].tolist()


def test_an_approximate_search_is_not_read_at_another_depth(
    combined: Guard, monkeypatch: pytest.MonkeyPatch
):
    """An approximate search's rows depend on k: the gate keeps its own depth and the
    combined statistic searches at its feature depth, with the one query vector."""
    depth = combined.search_depth()
    assert len(combined.kb) > depth
    gate = Gate(combined, context_k=depth + 1)  # deeper than the features read
    queries = _lines("out_of_knowledge.txt")[:2] + _lines("in_knowledge.txt")[:2]
    expected = combined.score(queries).p_values.tolist()
    gate.decide(queries[0])
    info = combined.kb.store.describe().model_copy(update={"exact": False})
    monkeypatch.setattr(combined.kb.store, "describe", lambda: info)
    calls = _count_calls(combined.kb, monkeypatch)
    decisions = gate.decide_many(queries)
    assert calls == {"embed": 1, "search": 2}
    assert [d.test.p_value for d in decisions] == expected


def test_shift_and_the_monitor_compare_combined_scores_with_the_conformal_half(combined: Guard):
    outside = _lines("out_of_knowledge.txt")
    report = shift_test(combined, outside)
    assert report.score_statistic == "combined" and report.shifted
    assert report.n_reference == combined.null_scores().size
    monitor = ShiftMonitor(combined, WindowSpec(size=10))
    np.testing.assert_allclose(monitor._score(outside[:10]), combined.score(outside[:10]).scores)


def test_score_file_gives_the_check_p_values(combined: Guard, tmp_path: Path):
    queries = _lines("out_of_knowledge.txt")[:6]
    log = tmp_path / "log.txt"
    log.write_text("\n".join(queries) + "\n", encoding="utf-8")
    table = score_file(combined, log, make_search(combined))
    assert table.statistic == "combined"
    np.testing.assert_allclose(table.p_value, [v.p_value for v in combined.check_many(queries)])


def test_the_real_question_check_uses_the_combined_scores(combined: Guard):
    check = compare_with_real(combined, _lines("in_knowledge.txt")[:20])
    assert check.score_statistic == "combined"
    assert check.critical_value == combined.critical_value()
    assert check.n_calibration == combined.null_scores().size


def test_the_ray_engine_is_refused_for_combined(combined: Guard):
    with pytest.raises(InputError, match="use --engine local, or --statistic mss"):
        make_search(combined, "ray")
    with pytest.raises(InputError, match="use --engine local"):
        make_search(combined, "ray", statistic="combined")
