//! Text search without storage (mongod's `fts`, text index version 3): parsing `$text`
//! arguments, the text index spec (`weights`, `default_language`, `language_override`,
//! compound prefix/suffix fields), the terms a document contributes with their scores, and
//! whether and how well a document matches a search.
//!
//! API for the planner and executor:
//! - [`TextQuery::parse`] validates a `$text` argument with mongod's errors.
//! - [`TextIndex::from_spec`] reads a text index's spec (as `createIndexes` normalised it).
//! - [`TextQuery::terms_to_scan`] gives the terms whose index keys to union (the stemmed
//!   positive terms and phrase words, `storage::textkeys` builds their key prefixes).
//! - [`TextIndex::score`] is the document's `{$meta: "textScore"}`, or `None` when it does not
//!   match: no positive term in its indexed fields, a negated term or phrase present, a
//!   positive phrase absent (case/diacritic sensitivity as asked).
//! - [`TextIndex::term_scores`] are the (term, score) pairs a document puts in the index.
//! - [`text_index_required`]: the error for `$text` without a text index (find the index with
//!   `IndexSpec::kind() == IndexKind::Text`; there is at most one).
//!
//! Scoring is mongod's (`FTSSpec::_scoreStringV2`): within one string of weight `w` with `n`
//! tokens (stop words removed), a term seen `c` times has frequency `f = Σ_{i<c} 1/2^i` and
//! scores `w · f · (0.5 · c / n + 0.5)`, times 1.1 when the term equals the whole string; a
//! document's score for a term sums over its strings; a search's score sums the document's
//! scores over the distinct terms to scan.
//!
//! Everything iterates (explicit stacks); nothing recurses over client data.

pub mod language;
pub mod unicode;

use std::collections::{BTreeMap, BTreeSet};

use bson::{Bson, Document};

pub use language::Language;
use tideway_base::display::type_name;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use unicode::TokenOptions;

/// The largest weight a text index accepts (exclusive), mongod's `MAX_WORD_WEIGHT`.
pub const MAX_WORD_WEIGHT: f64 = 100_000.0;
/// Terms longer than this many bytes are stored as their first bytes plus the MD5 of the
/// whole term (mongod's `termKeyPrefixLengthV3`, 224 + 32 hex digits).
pub const TERM_KEY_PREFIX_BYTES: usize = 224;

/// A parsed `$text` argument: `{$search, $language?, $caseSensitive?, $diacriticSensitive?}`.
#[derive(Clone, Debug, PartialEq)]
pub struct TextQuery {
    pub search: String,
    /// `None`: the index's `default_language`.
    pub language: Option<Language>,
    pub case_sensitive: bool,
    pub diacritic_sensitive: bool,
}

/// A search resolved against one index's default language: mongod's `FTSQueryImpl`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextSearch {
    /// Terms a document must contain one of (in the query's case/diacritic sensitivity).
    pub positive_terms: BTreeSet<String>,
    pub negated_terms: BTreeSet<String>,
    pub positive_phrases: Vec<String>,
    pub negated_phrases: Vec<String>,
    /// Lower-cased, stemmed positive terms (phrase words included): what the index is scanned
    /// for and what the score sums over.
    pub terms_for_bounds: BTreeSet<String>,
    pub language: Option<Language>,
    pub case_sensitive: bool,
    pub diacritic_sensitive: bool,
}

fn type_mismatch(field: &str, expected: &str, value: &Bson) -> CommandError {
    CommandError::new(
        ErrorCode::TypeMismatch,
        format!(
            "\"{field}\" had the wrong type. Expected {expected}, found {}",
            type_name(value)
        ),
    )
}

/// mongod's error for `$text` on a collection without a text index (27 IndexNotFound).
pub fn text_index_required() -> CommandError {
    CommandError::new(
        ErrorCode::IndexNotFound,
        "text index required for $text query",
    )
}

/// mongod's error for a language it does not know.
pub(crate) fn unsupported_language(name: &str) -> CommandError {
    CommandError::bad_value(format!(
        "unsupported language: \"{name}\" for text index version 3"
    ))
}

impl TextQuery {
    /// Parses the value of `$text`, with mongod's errors (`ExtensionsCallback::
    /// extractTextMatchExpressionParams`, and the language check of text index version 3).
    pub fn parse(argument: &Bson) -> CommandResult<TextQuery> {
        let Bson::Document(argument) = argument else {
            return Err(CommandError::bad_value("$text expects an object"));
        };
        let search = match argument.get("$search") {
            Some(Bson::String(search)) => search.clone(),
            Some(other) => return Err(type_mismatch("$search", "string", other)),
            None => {
                return Err(CommandError::new(
                    ErrorCode::NoSuchKey,
                    "Missing expected field \"$search\"",
                ))
            }
        };
        let mut expected_fields = 1;
        let language = match argument.get("$language") {
            Some(Bson::String(name)) => {
                expected_fields += 1;
                Some(Language::parse(name).ok_or_else(|| unsupported_language(name))?)
            }
            Some(other) => return Err(type_mismatch("$language", "string", other)),
            None => None,
        };
        let mut flag = |name: &str| match argument.get(name) {
            Some(Bson::Boolean(value)) => {
                expected_fields += 1;
                Ok(*value)
            }
            Some(other) => Err(type_mismatch(name, "bool", other)),
            None => Ok(false),
        };
        let case_sensitive = flag("$caseSensitive")?;
        let diacritic_sensitive = flag("$diacriticSensitive")?;
        if argument.len() != expected_fields {
            return Err(CommandError::bad_value("extra fields in $text"));
        }
        Ok(TextQuery {
            search,
            language,
            case_sensitive,
            diacritic_sensitive,
        })
    }

    /// The search's terms, phrases and negations in `index`'s default language unless the
    /// query names one (mongod's `FTSQueryImpl::parse`).
    pub fn resolve(&self, index: &TextIndex) -> TextSearch {
        let language = self.language.unwrap_or(index.default_language);
        let mut positive_sentence = String::new();
        let mut negative_sentence = String::new();
        let mut positive_phrases = Vec::new();
        let mut negated_phrases = Vec::new();
        let mut in_negation = false;
        let mut in_phrase = false;
        let mut quote_offset = 0;
        for token in query_tokens(&self.search) {
            match token.kind {
                QueryTokenKind::Text => {
                    if in_phrase && in_negation {
                        continue;
                    }
                    if in_negation && token.after_whitespace {
                        in_negation = false;
                    }
                    let sentence = if in_negation {
                        &mut negative_sentence
                    } else {
                        &mut positive_sentence
                    };
                    sentence.push_str(token.text);
                    sentence.push(' ');
                }
                QueryTokenKind::Minus => {
                    if !in_phrase && token.after_whitespace {
                        in_negation = true;
                    }
                }
                QueryTokenKind::Quote => {
                    if in_phrase {
                        let phrase = self
                            .search
                            .get(quote_offset + 1..token.offset)
                            .unwrap_or_default()
                            .to_string();
                        if in_negation {
                            negated_phrases.push(phrase);
                        } else {
                            positive_phrases.push(phrase);
                        }
                        in_phrase = false;
                    } else {
                        in_phrase = true;
                        if in_negation && token.after_whitespace {
                            in_negation = false;
                        }
                        quote_offset = token.offset;
                    }
                }
            }
        }
        let mut search = TextSearch {
            positive_phrases,
            negated_phrases,
            language: Some(language),
            case_sensitive: self.case_sensitive,
            diacritic_sensitive: self.diacritic_sensitive,
            ..TextSearch::default()
        };
        let insensitive = TokenOptions {
            filter_stop_words: true,
            ..TokenOptions::default()
        };
        let sensitive = TokenOptions {
            filter_stop_words: true,
            case_sensitive: self.case_sensitive,
            diacritic_sensitive: self.diacritic_sensitive,
        };
        for (sentence, negated) in [(&positive_sentence, false), (&negative_sentence, true)] {
            let words = unicode::tokenize(sentence, language, insensitive);
            if !negated {
                search.terms_for_bounds.extend(words.iter().cloned());
            }
            let active = if self.case_sensitive || self.diacritic_sensitive {
                unicode::tokenize(sentence, language, sensitive)
            } else {
                words
            };
            if negated {
                search.negated_terms.extend(active);
            } else {
                search.positive_terms.extend(active);
            }
        }
        search
    }

    /// The stemmed, lower-cased positive terms (phrase words included) whose index keys the
    /// planner unions to find candidates.
    pub fn terms_to_scan(&self, index: &TextIndex) -> Vec<String> {
        self.resolve(index).terms_for_bounds.into_iter().collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum QueryTokenKind {
    Text,
    Minus,
    Quote,
}

struct QueryToken<'a> {
    kind: QueryTokenKind,
    text: &'a str,
    /// Byte offset in the search string.
    offset: usize,
    /// Whitespace came before this token (or it is the first one).
    after_whitespace: bool,
}

/// mongod's `FTSQueryParser`: whitespace (`\n \v \f \r` and space) separates, `-` and `"` are
/// one-character tokens, anything else runs of text.
fn query_tokens(search: &str) -> Vec<QueryToken<'_>> {
    let is_space = |c: char| matches!(c, '\n' | '\u{b}' | '\u{c}' | '\r' | ' ');
    let mut tokens = Vec::new();
    let mut chars = search.char_indices().peekable();
    let mut after_whitespace = true;
    while let Some((offset, c)) = chars.next() {
        if is_space(c) {
            after_whitespace = true;
            continue;
        }
        let kind = match c {
            '-' => QueryTokenKind::Minus,
            '"' => QueryTokenKind::Quote,
            _ => QueryTokenKind::Text,
        };
        let mut end = offset + c.len_utf8();
        if kind == QueryTokenKind::Text {
            while let Some(&(next_offset, next)) = chars.peek() {
                if is_space(next) || next == '-' || next == '"' {
                    break;
                }
                end = next_offset + next.len_utf8();
                chars.next();
            }
        }
        tokens.push(QueryToken {
            kind,
            text: &search[offset..end],
            offset,
            after_whitespace,
        });
        after_whitespace = false;
    }
    tokens
}

/// A text index definition: mongod's `FTSSpec` for text index version 3.
#[derive(Clone, Debug, PartialEq)]
pub struct TextIndex {
    /// Field path → weight, ordered by path (a `$**` wildcard is not in it).
    pub weights: BTreeMap<String, f64>,
    /// `$**`: every string field is indexed.
    pub wildcard: bool,
    pub default_language: Language,
    pub language_override: String,
    /// Key fields before the text fields (`{a: 1, b: "text"}` → `a`), with their directions
    /// (1 or -1); queries must pin them by equality.
    pub prefix_fields: Vec<(String, i32)>,
    /// Key fields after the text fields.
    pub suffix_fields: Vec<(String, i32)>,
}

/// One string a text index reads from a document, with its weight and language.
struct TextValue<'a> {
    text: &'a str,
    language: Language,
    weight: f64,
}

impl TextIndex {
    /// Reads a normalised text index spec (`{key: {…, _fts: "text", _ftsx: 1, …}, weights,
    /// default_language, language_override, textIndexVersion: 3}`), as `createIndexes` stores it.
    pub fn from_spec(spec: &Document) -> CommandResult<TextIndex> {
        let invalid = |why: &str| {
            CommandError::new(
                ErrorCode::CannotCreateIndex,
                format!("found invalid spec for text index: {why}"),
            )
        };
        let mut weights = BTreeMap::new();
        let mut wildcard = false;
        let Ok(weight_doc) = spec.get_document("weights") else {
            return Err(invalid("weights is not an object"));
        };
        for (field, weight) in weight_doc {
            let weight = tideway_base::bsonutil::as_f64(weight).ok_or_else(|| invalid("weight"))?;
            if field == "$**" {
                wildcard = true;
            } else {
                weights.insert(field.clone(), weight);
            }
        }
        let default_language = match spec.get("default_language") {
            Some(Bson::String(name)) => Language::parse(name).ok_or_else(|| {
                CommandError::new(
                    ErrorCode::BadValue,
                    format!("Unrecognized language {name} found for text index."),
                )
            })?,
            _ => Language::English,
        };
        let language_override = spec
            .get_str("language_override")
            .unwrap_or("language")
            .to_string();
        let mut prefix_fields = Vec::new();
        let mut suffix_fields = Vec::new();
        let mut passed_text = false;
        if let Ok(key) = spec.get_document("key") {
            for (field, value) in key {
                if field == "_fts" || field == "_ftsx" {
                    passed_text = true;
                    continue;
                }
                let direction = match tideway_base::bsonutil::as_f64(value) {
                    Some(number) if number < 0.0 => -1,
                    _ => 1,
                };
                if passed_text {
                    suffix_fields.push((field.clone(), direction));
                } else {
                    prefix_fields.push((field.clone(), direction));
                }
            }
        }
        Ok(TextIndex {
            weights,
            wildcard,
            default_language,
            language_override,
            prefix_fields,
            suffix_fields,
        })
    }

    /// The language a (sub)document asks for through the language override field, or
    /// `current` (17261 for a non-string, 17262 for an unknown language, as mongod).
    fn language_of(&self, fields: Option<&Document>, current: Language) -> CommandResult<Language> {
        match fields.and_then(|document| document.get(&self.language_override)) {
            None => Ok(current),
            Some(Bson::String(name)) => Language::parse(name).ok_or_else(|| {
                CommandError::new(
                    ErrorCode::Location17262,
                    format!("language override unsupported: {name}"),
                )
            }),
            Some(_) => Err(CommandError::new(
                ErrorCode::Location17261,
                "found language override field in document with non-string type",
            )),
        }
    }

    /// The strings of `document` this index reads, as mongod's `FTSElementIterator` walks
    /// them (weights by path prefix, sub-documents may override the language).
    fn text_values<'a>(&self, document: &'a Document) -> CommandResult<Vec<TextValue<'a>>> {
        struct Frame<'a> {
            elements: Vec<(String, &'a Bson)>,
            next: usize,
            language: Language,
            parent_path: String,
            is_array: bool,
        }
        let root_language = self.language_of(Some(document), self.default_language)?;
        let mut stack = vec![Frame {
            elements: document.iter().map(|(k, v)| (k.clone(), v)).collect(),
            next: 0,
            language: root_language,
            parent_path: String::new(),
            is_array: false,
        }];
        let mut values = Vec::new();
        while let Some(frame) = stack.last_mut() {
            let Some((name, value)) = frame.elements.get(frame.next).cloned() else {
                stack.pop();
                continue;
            };
            frame.next += 1;
            if self.wildcard && name == self.language_override {
                continue;
            }
            let dotted = if frame.parent_path.is_empty() {
                name.clone()
            } else if frame.is_array {
                frame.parent_path.clone()
            } else {
                format!("{}.{name}", frame.parent_path)
            };
            let lookup = if matches!(value, Bson::Document(_)) {
                format!("{dotted}.")
            } else {
                dotted.clone()
            };
            let candidate = self.weights.range(lookup..).next();
            if !self.wildcard {
                match candidate {
                    None => continue,
                    Some((weight_path, _))
                        if !(weight_path == &dotted
                            || weight_path.starts_with(&format!("{dotted}."))) =>
                    {
                        continue
                    }
                    Some(_) => {}
                }
            }
            let exact = candidate.is_some_and(|(path, _)| path == &dotted);
            let weight = candidate.map_or(1.0, |(_, weight)| *weight);
            let language = frame.language;
            let parent_is_array = frame.is_array;
            match value {
                Bson::String(text) if exact || self.wildcard => {
                    values.push(TextValue {
                        text,
                        language,
                        weight,
                    });
                }
                Bson::Document(sub) if !exact || self.wildcard => {
                    let language = self.language_of(Some(sub), language)?;
                    stack.push(Frame {
                        elements: sub.iter().map(|(k, v)| (k.clone(), v)).collect(),
                        next: 0,
                        language,
                        parent_path: dotted,
                        is_array: false,
                    });
                }
                Bson::Array(elements) if !parent_is_array || self.wildcard => {
                    stack.push(Frame {
                        elements: elements
                            .iter()
                            .enumerate()
                            .map(|(i, v)| (i.to_string(), v))
                            .collect(),
                        next: 0,
                        language,
                        parent_path: dotted,
                        is_array: true,
                    });
                }
                _ => {}
            }
        }
        Ok(values)
    }

    /// Term → score for `document` (mongod's `FTSSpec::scoreDocument`): the entries a text
    /// index keeps for it (before the long-term shortening of `storage::textkeys`).
    pub fn term_scores(&self, document: &Document) -> CommandResult<BTreeMap<String, f64>> {
        let mut scores: BTreeMap<String, f64> = BTreeMap::new();
        for value in self.text_values(document)? {
            let tokens = unicode::tokenize(
                value.text,
                value.language,
                TokenOptions {
                    filter_stop_words: true,
                    ..TokenOptions::default()
                },
            );
            let token_count = tokens.len() as f64;
            // term → (frequency, count, exponent)
            let mut terms: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
            for token in &tokens {
                let entry = terms.entry(token.as_str()).or_insert((0.0, 0.0, 0.0));
                entry.2 = if entry.2 == 0.0 { 1.0 } else { entry.2 * 2.0 };
                entry.1 += 1.0;
                entry.0 += 1.0 / entry.2;
            }
            for (term, (frequency, count, _)) in terms {
                let coefficient = 0.5 * count / token_count + 0.5;
                let adjustment =
                    if value.text.len() == term.len() && value.text.eq_ignore_ascii_case(term) {
                        1.1
                    } else {
                        1.0
                    };
                *scores.entry(term.to_string()).or_insert(0.0) +=
                    value.weight * frequency * coefficient * adjustment;
            }
        }
        Ok(scores)
    }

    /// The distinct terms `document` puts in the index.
    pub fn terms(&self, document: &Document) -> CommandResult<Vec<String>> {
        Ok(self.term_scores(document)?.into_keys().collect())
    }

    /// The document's text score for `query`, or `None` when it does not match (see the
    /// module documentation). A document the index could not hold (a bad language override)
    /// does not match.
    pub fn score(&self, query: &TextQuery, document: &Document) -> Option<f64> {
        self.score_search(&query.resolve(self), document)
    }

    /// As [`TextIndex::score`] for an already resolved search (resolve once per query).
    pub(crate) fn score_search(&self, search: &TextSearch, document: &Document) -> Option<f64> {
        let scores = self.term_scores(document).ok()?;
        let mut total = 0.0;
        let mut found = false;
        for term in &search.terms_for_bounds {
            if let Some(score) = scores.get(term) {
                total += score;
                found = true;
            }
        }
        (found && self.matches(search, document).unwrap_or(false)).then_some(total)
    }

    /// mongod's `FTSMatcher::matches`.
    fn matches(&self, search: &TextSearch, document: &Document) -> CommandResult<bool> {
        let values = self.text_values(document)?;
        let options = TokenOptions {
            filter_stop_words: false,
            case_sensitive: search.case_sensitive,
            diacritic_sensitive: search.diacritic_sensitive,
        };
        let has_term = |terms: &BTreeSet<String>| {
            values.iter().any(|value| {
                unicode::tokenize(value.text, value.language, options)
                    .iter()
                    .any(|token| terms.contains(token))
            })
        };
        if !has_term(&search.positive_terms) {
            return Ok(false);
        }
        if !search.negated_terms.is_empty() && has_term(&search.negated_terms) {
            return Ok(false);
        }
        let phrase_present = |phrase: &str| {
            values.iter().any(|value| {
                let turkish = value.language == Language::Turkish;
                let case_sensitive = search.case_sensitive && !turkish;
                let haystack = unicode::normalize(
                    value.text,
                    case_sensitive,
                    search.diacritic_sensitive,
                    turkish,
                );
                let needle =
                    unicode::normalize(phrase, case_sensitive, search.diacritic_sensitive, turkish);
                haystack.contains(&needle)
            })
        };
        Ok(search.positive_phrases.iter().all(|p| phrase_present(p))
            && !search.negated_phrases.iter().any(|p| phrase_present(p)))
    }
}

#[cfg(test)]
mod tests;
