"""Numpy reimplementations of the formulas, independent of the Keras code."""

import math

import numpy as np


def weights_by_name(layer):
    """{"sublayer/variable": array} for a layer's weights."""
    return {"/".join(v.path.split("/")[-2:]): np.asarray(v.numpy(), "float64")
            for v in layer.weights}


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def log_softmax(x, axis=-1):
    x = x - x.max(axis, keepdims=True)
    return x - np.log(np.exp(x).sum(axis, keepdims=True))


def attention(layer, query, value, mask=None, bias=None):
    """Multi-head attention by explicit per-head loops, from `layer`'s weights."""
    w = weights_by_name(layer)
    heads, size = layer.num_heads, layer.head_size

    def project(x, name):
        y = np.einsum("btd,dnh->btnh", x, w[f"{name}/kernel"])
        return y + w[f"{name}/bias"] if f"{name}/bias" in w else y

    q, k, v = project(query, "query"), project(value, "key"), project(value, "value")
    scale = layer.scale if layer.scale is not None else 1 / math.sqrt(size)
    out = np.zeros(query.shape[:2] + (heads, v.shape[-1]))
    for b in range(query.shape[0]):
        for n in range(heads):
            scores = q[b, :, n] @ k[b, :, n].T * scale
            if bias is not None:
                scores = scores + bias[b % bias.shape[0], n]
            if mask is not None:
                scores = np.where(mask[b], scores, -1e9)
            out[b, :, n] = softmax(scores) @ v[b, :, n]
    y = np.einsum("btnh,nhd->btd", out, w["attention_output/kernel"])
    return y + w["attention_output/bias"] if "attention_output/bias" in w else y


def layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def gelu(x):
    # The exact (erf) GELU, Hendrycks & Gimpel 2016.
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / math.sqrt(2)))
