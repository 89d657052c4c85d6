"""Lines of Unicode punctuation, symbols, accents and spaces the tokenizers' normalisers are
held to.
"""



TEXTS = [
    "Use ´timeout´ and `retry` \u00b4here\u00b4.",
    "“Quoted” ‘single’ «guillemets» — dash – en … ellipsis ¿qué? ¡sí!",
    "· • § ¶ † ‡ ‰ ′ ″ 、 。 「括弧」 【注】 ！ ？ ＂ ＃ ＠",
    "Symbols: ´ ` ¨ ¯ ¸ ˆ ˜ ° ± × ÷ © ® ™ € £ ¥ ¢ ¤ ¬ ¦ µ",
    "Superscripts ² ³ ¹ fractions ¼ ½ ¾ ligatures ﬁne ﬂow",
    "Arrows ← → math ∀x ∑ √2 ∞ ≤ ≥ ≠ and ♥ ★ ☺ 😀 emoji",
    "Accents: café naïve résumé Ångström São Paulo Zoë façade crème brûlée",
    "İstanbul ΣΑΣ Straße ǅemal Øresund Łódź",
    "Spaces:\u00a0no-break\u2009thin\u3000ideographic\u2028line\u2029para end",
    "Controls: zero\u200bwidth\u200emark\x07bell\ufeffbom\ufffdrepl\x00nul\ttab\nnl",
    "CJK 中文字 漢字 かな カナ 한국어 mixed中text",
    "Full width Ａｂｃ １２３ and modifier letters ʼ ʻ ˈ ˌ",
    "Combining e\u0301 a\u0300 n\u0303 and precomposed é à ñ",
]
