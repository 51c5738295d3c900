"""The realistic benchmark vectors (bench.realistic): deterministic, shaped like the local
model's embeddings of the real sample, and unlike the ``hash`` vectors they replace."""

import numpy as np
import pytest

from bench import corpus, realistic

pytestmark = pytest.mark.slow  # the first fit embeds the sample with the local model


@pytest.fixture(scope="module")
def model():
    pytest.importorskip("sentence_transformers")
    return realistic.fit()


def test_draws_are_deterministic_unit_vectors_of_the_models_dimension(model):
    first = model.chunks(np.random.default_rng(3), 500)
    again = model.chunks(np.random.default_rng(3), 500)
    other = model.chunks(np.random.default_rng(4), 500)
    assert first.dtype == np.float32 and first.shape == (500, 384)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    queries = model.queries(np.random.default_rng(5), first[:50])
    assert np.array_equal(queries, model.queries(np.random.default_rng(5), first[:50]))
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)


def test_the_fit_is_cached_and_read_back_unchanged(model):
    path = realistic._cache_path(0)
    assert path.exists()
    again = realistic.fit()
    for name in ("centroids", "shares", "spreads", "shape", "query_cosines", "sample"):
        assert np.array_equal(getattr(model, name), getattr(again, name))
    assert abs(model.shares.sum() - 1.0) < 1e-9
    assert len(model.sample) == len(realistic.sample_texts())


def test_generated_vectors_have_the_real_samples_neighbourhoods_and_hash_vectors_do_not(model):
    profile = model.realism(seed=1)
    rng = np.random.default_rng(2)
    vocab = corpus.Vocabulary.build(size=5000)
    n = len(model.sample)
    lengths = np.full(n, corpus.MEAN_WORDS)
    hashed = corpus.embed_batch(vocab, lengths, vocab.draw(rng, int(lengths.sum())))
    hashed_profile = realistic.cosine_profile(hashed, rng, prefix="hash")

    real, generated = profile["real_nn_cos_mean"], profile["generated_nn_cos_mean"]
    assert abs(generated - real) <= 0.08, profile  # nearest neighbours as close as the real ones
    assert abs(profile["generated_pair_cos_mean"] - profile["real_pair_cos_mean"]) <= 0.05
    assert abs(profile["generated_nn_margin"] - profile["real_nn_margin"]) <= 0.08
    # hash vectors all lean towards one mean: neighbours hardly closer than any other vector
    assert profile["generated_nn_margin"] > 2 * hashed_profile["hash_nn_margin"], hashed_profile


def test_queries_sit_at_the_measured_distance_from_their_chunk(model):
    rng = np.random.default_rng(7)
    sources = model.chunks(rng, 2000)
    queries = model.queries(rng, sources)
    cosines = np.sum(queries * sources, axis=1)
    assert abs(cosines.mean() - model.query_cosines.mean()) <= 0.02
    assert 0.2 < model.query_cosines.mean() < 0.9  # a sentence of a paragraph: near, not equal
