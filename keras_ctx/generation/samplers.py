"""Samplers: how the next token is picked from the logits (greedy, random, top-k, top-p, beam).

Each sampler maps (batch, vocab) logits to (batch,) int32 token ids; the
random ones draw from (seed, step), so a position's draw does not depend on
how the loop reached it. `BeamSampler` only holds beam search's settings: its
loop is `decoding.beam_loop`.
"""

from keras import ops

from keras_ctx import backend
from keras_ctx.common import validation

NEG_INF = -1e9


class Sampler:
    """Picks the next token from (batch, vocab) logits; `seed` is an int tensor."""

    def __call__(self, logits, step, seed):
        raise NotImplementedError

    def get_config(self):
        return {}

    def _key(self):
        return (type(self).__name__,) + tuple(sorted(self.get_config().items()))


class GreedySampler(Sampler):
    """The most probable token."""

    def __call__(self, logits, step, seed):
        return ops.cast(ops.argmax(logits, axis=-1), "int32")


class RandomSampler(Sampler):
    """Samples from softmax(logits / temperature)."""

    def __init__(self, temperature=1.0):
        self.temperature = validation.positive_number("temperature", temperature)

    def _sample(self, logits, step, seed):
        return backend.categorical(ops.cast(logits, "float32") / self.temperature, seed, step)

    def __call__(self, logits, step, seed):
        return self._sample(logits, step, seed)

    def get_config(self):
        return {"temperature": self.temperature}


class TopKSampler(RandomSampler):
    """Samples among the k most probable tokens (Fan et al., 2018)."""

    def __init__(self, k=5, temperature=1.0):
        super().__init__(temperature)
        self.k = validation.positive_int("k", k)

    def __call__(self, logits, step, seed):
        values, indices = ops.top_k(ops.cast(logits, "float32"), k=self.k)
        choice = self._sample(values, step, seed)
        return ops.take_along_axis(indices, choice[:, None], axis=1)[:, 0]

    def get_config(self):
        return {"k": self.k, "temperature": self.temperature}


class TopPSampler(RandomSampler):
    """Nucleus sampling (Holtzman et al., 2020): the smallest set of tokens with
    cumulative probability >= p."""

    def __init__(self, p=0.9, temperature=1.0):
        super().__init__(temperature)
        self.p = validation.fraction("p", p)

    def __call__(self, logits, step, seed):
        logits = ops.cast(logits, "float32") / self.temperature
        sorted_logits, indices = ops.top_k(logits, k=logits.shape[-1])
        probabilities = ops.softmax(sorted_logits, axis=-1)
        # Keep token i when the mass strictly before it is < p (the top token always).
        mass = ops.cumsum(probabilities, axis=-1)
        before = ops.concatenate([ops.zeros_like(mass[:, :1]), mass[:, :-1]], axis=-1)
        sorted_logits = ops.where(before < self.p, sorted_logits, NEG_INF)
        choice = backend.categorical(sorted_logits, seed, step)
        return ops.take_along_axis(indices, choice[:, None], axis=1)[:, 0]

    def get_config(self):
        return {"p": self.p, "temperature": self.temperature}


def gnmt_length_penalty(length, alpha):
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, Sec. 7).

    Beam search ranks finished hypotheses by log P(Y) / lp(Y): alpha = 0 is
    the plain log-probability, alpha > 0 favours longer outputs (T5's beam
    search gin sets 0.6), alpha < 0 shorter ones. |Y| counts the
    generated tokens, the stop token included, not the prompt.
    """
    return ((5.0 + length) / 6.0) ** alpha


class BeamSampler(Sampler):
    """Beam search over the `num_beams` most probable continuations.

    Two sets per row, as in GNMT / T5X: `num_beams` running beams ranked by
    log-probability, and the `num_beams` best finished hypotheses (ended
    with a stop token, or reaching max_length) ranked by
    log P(Y) / gnmt_length_penalty(|Y|, length_penalty). A row is done when no
    running beam can still enter its finished set (its log-probability can
    only fall; the bound takes the most favourable length penalty left);
    the loop ends when every row is done or at max_length. All beams are
    returned with their scores, best first.

    Args:
        num_beams: beams kept per row.
        length_penalty: alpha of `gnmt_length_penalty` (0 = none).
        no_repeat_ngram_size: n > 0 forbids any token that would repeat an
            n-gram already in the sequence (prompt included), as Hugging
            Face's `no_repeat_ngram_size`; 0 = off.
    """

    def __init__(self, num_beams=4, length_penalty=0.0, no_repeat_ngram_size=0):
        self.num_beams = validation.positive_int("num_beams", num_beams)
        self.length_penalty = validation.finite_number("length_penalty", length_penalty)
        # 0 = off
        self.no_repeat_ngram_size = validation.non_negative_int("no_repeat_ngram_size",
                                                                no_repeat_ngram_size)

    def get_config(self):
        return {"num_beams": self.num_beams, "length_penalty": self.length_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size}


SAMPLERS = {
    "greedy": GreedySampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
}


def get_sampler(identifier):
    """A Sampler from itself or a name: greedy, random, top_k, top_p, beam."""
    if isinstance(identifier, Sampler):
        return identifier
    if identifier not in SAMPLERS:
        raise ValueError(
            f"Unknown sampler {identifier!r}; use one of {sorted(SAMPLERS)} or a "
            "Sampler instance (e.g. TopKSampler(k=10))."
        )
    return SAMPLERS[identifier]()
