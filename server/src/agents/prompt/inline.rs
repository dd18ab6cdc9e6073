//! Inline formatting: the markdown of one text block parsed into plain text and annotations
//! (`Bold`, `Italic`, `Code`, `Link`, `Embed`) whose offsets count UTF-16 units.

use super::text::is_js_space;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Annotation {
    pub(super) kind: &'static str,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) link: Option<String>,
}

/// Plain text, its length in UTF-16 units, and annotations over those units.
#[derive(Debug, Default)]
pub(super) struct Inline {
    pub(super) text: String,
    units: usize,
    pub(super) annotations: Vec<Annotation>,
}

impl Inline {
    pub(super) fn push(&mut self, c: char) {
        self.text.push(c);
        self.units += c.len_utf16();
    }

    fn push_all(&mut self, chars: &[char]) {
        chars.iter().for_each(|&c| self.push(c));
    }

    /// Appends `inner` (its annotations shifted) and an annotation spanning it.
    fn wrap(&mut self, inner: Inline, kind: &'static str, link: Option<String>) {
        let start = self.units;
        self.text.push_str(&inner.text);
        self.units += inner.units;
        let shifted =
            inner.annotations.into_iter().map(|a| Annotation { start: a.start + start, end: a.end + start, ..a });
        self.annotations.extend(shifted);
        self.annotations.push(Annotation { kind, start, end: self.units, link });
    }
}

/// Links may nest inside links; deeper nesting than this stays plain text, so a hostile prompt
/// cannot exhaust the stack (upstream would fail with a JavaScript stack overflow instead).
const MAX_INLINE_DEPTH: usize = 64;

/// Marks "no such position" in [`InlineParser`] tables.
const NONE: usize = usize::MAX;

/// Inline markdown of one text, with lookup tables so each construct finds its end in constant
/// time. Upstream rescans the rest of the text for every `[`, `<`, `*` or `` ` ``, which is
/// quadratic (seconds for 64 KiB of `[`); the results here are the same.
pub(super) struct InlineParser<'a> {
    raw: &'a [char],
    /// The `]` matching the `[` at each index (a match depends only on what follows the `[`).
    bracket: Vec<usize>,
    /// The next `)`, `>`, `` ` ``, `**`, and `*` with no `*` beside it, at or after each index.
    paren: Vec<usize>,
    angle: Vec<usize>,
    tick: Vec<usize>,
    double_star: Vec<usize>,
    lone_star: Vec<usize>,
}

impl<'a> InlineParser<'a> {
    pub(super) fn new(raw: &'a [char]) -> Self {
        let n = raw.len();
        let mut bracket = vec![NONE; n];
        let mut open = Vec::new();
        for (j, &c) in raw.iter().enumerate() {
            if c == '[' {
                open.push(j);
            } else if c == ']'
                && let Some(i) = open.pop()
            {
                bracket[i] = j;
            }
        }
        let star = |k: usize| raw.get(k) == Some(&'*');
        let scan = |hit: &dyn Fn(usize) -> bool| {
            let mut next = vec![NONE; n + 1];
            for j in (0..n).rev() {
                next[j] = if hit(j) { j } else { next[j + 1] };
            }
            next
        };
        Self {
            raw,
            bracket,
            paren: scan(&|j| raw[j] == ')'),
            angle: scan(&|j| raw[j] == '>'),
            tick: scan(&|j| raw[j] == '`'),
            double_star: scan(&|j| star(j) && star(j + 1)),
            lone_star: scan(&|j| star(j) && !star(j + 1) && (j == 0 || !star(j - 1))),
        }
    }

    /// The first hit in `table` at or after `from` and before `bound`.
    fn next(table: &[usize], from: usize, bound: usize) -> Option<usize> {
        table.get(from).copied().filter(|&j| j < bound)
    }

    /// For `[...](...)` with `[` at `open`, inside `..hi`: the matching `]` and the first `)` after it.
    fn link_shape(&self, open: usize, hi: usize) -> Option<(usize, usize)> {
        let close = Self::next(&self.bracket, open, hi)?;
        if close + 1 >= hi || self.raw[close + 1] != '(' {
            return None;
        }
        Some((close, Self::next(&self.paren, close + 2, hi)?))
    }

    /// The closing `*` of an italic span inside `..hi`. The last position of a nested slice is
    /// checked by hand: the table looked at the character after the slice.
    fn lone_star(&self, from: usize, hi: usize) -> Option<usize> {
        if let Some(end) = Self::next(&self.lone_star, from, hi.saturating_sub(1)) {
            return Some(end);
        }
        let last = hi.checked_sub(1)?;
        (last >= from && self.raw[last] == '*' && self.raw[last - 1] != '*').then_some(last)
    }

    /// Parses `raw[lo..hi]` as upstream parses that substring on its own.
    pub(super) fn parse(&self, lo: usize, hi: usize, depth: usize) -> Inline {
        let raw = self.raw;
        let mut out = Inline::default();
        if depth > MAX_INLINE_DEPTH {
            out.push_all(&raw[lo..hi]);
            return out;
        }
        let mut i = lo;
        while i < hi {
            let (c, next) = (raw[i], (i + 1 < hi).then(|| raw[i + 1]));
            if c == '\\'
                && let Some(escaped) = next
            {
                out.push(escaped);
                i += 2;
                continue;
            }
            // An inline image keeps only its alt text: Seed has no inline images.
            if c == '!'
                && next == Some('[')
                && let Some((close, paren)) = self.link_shape(i + 1, hi)
            {
                out.push_all(&raw[i + 2..close]);
                i = paren + 1;
                continue;
            }
            if c == '<'
                && let Some(end) = Self::next(&self.angle, i + 1, hi)
                && is_autolink(&raw[i + 1..end])
            {
                let url: String = raw[i + 1..end].iter().collect();
                // Hypermedia links are embeds on an object-replacement placeholder.
                let (kind, shown) = if url.starts_with("hm://") { ("Embed", "\u{fffc}") } else { ("Link", &*url) };
                let mut inner = Inline::default();
                shown.chars().for_each(|c| inner.push(c));
                out.wrap(inner, kind, Some(url.clone()));
                i = end + 1;
                continue;
            }
            if c == '['
                && let Some((close, paren)) = self.link_shape(i, hi)
            {
                out.wrap(self.parse(i + 1, close, depth + 1), "Link", Some(raw[close + 2..paren].iter().collect()));
                i = paren + 1;
                continue;
            }
            if c == '*'
                && next == Some('*')
                && let Some(end) = Self::next(&self.double_star, i + 2, hi.saturating_sub(1))
            {
                out.wrap(self.parse(i + 2, end, depth + 1), "Bold", None);
                i = end + 2;
                continue;
            }
            if c == '*'
                && next != Some('*')
                && let Some(end) = self.lone_star(i + 1, hi)
            {
                out.wrap(self.parse(i + 1, end, depth + 1), "Italic", None);
                i = end + 1;
                continue;
            }
            if c == '`'
                && let Some(end) = Self::next(&self.tick, i + 1, hi)
            {
                let mut code = Inline::default();
                code.push_all(&raw[i + 1..end]);
                out.wrap(code, "Code", None);
                i = end + 1;
                continue;
            }
            out.push(c);
            i += 1;
        }
        out
    }
}

/// `^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$` with no `<`, `>` or space anywhere.
fn is_autolink(inner: &[char]) -> bool {
    let scheme = inner.iter().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')).count();
    inner.first().is_some_and(|c| c.is_ascii_alphabetic())
        && inner.get(scheme) == Some(&':')
        && !inner.iter().any(|&c| is_js_space(c) || c == '<' || c == '>')
}
