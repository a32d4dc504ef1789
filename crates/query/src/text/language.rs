//! The languages of text indexes (mongod's text index version 3 list, with their two-letter
//! aliases, case-insensitive), their Snowball stemmers (the `rust-stemmers` crate) and stop
//! words (Snowball's lists, data files in `data/`).

use std::collections::HashSet;
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

/// A text search language. `None` means no stemming and no stop words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    None,
    Danish,
    Dutch,
    English,
    Finnish,
    French,
    German,
    Hungarian,
    Italian,
    Norwegian,
    Portuguese,
    Romanian,
    Russian,
    Spanish,
    Swedish,
    Turkish,
}

/// (canonical name, alias, language), mongod's `MONGO_FTS_LANGUAGE_LIST`.
const LANGUAGES: &[(&str, &str, Language)] = &[
    ("none", "none", Language::None),
    ("danish", "da", Language::Danish),
    ("dutch", "nl", Language::Dutch),
    ("english", "en", Language::English),
    ("finnish", "fi", Language::Finnish),
    ("french", "fr", Language::French),
    ("german", "de", Language::German),
    ("hungarian", "hu", Language::Hungarian),
    ("italian", "it", Language::Italian),
    ("norwegian", "nb", Language::Norwegian),
    ("portuguese", "pt", Language::Portuguese),
    ("romanian", "ro", Language::Romanian),
    ("russian", "ru", Language::Russian),
    ("spanish", "es", Language::Spanish),
    ("swedish", "sv", Language::Swedish),
    ("turkish", "tr", Language::Turkish),
];

impl Language {
    /// The language named `name` or its alias, ASCII case-insensitively, as mongod's language
    /// registry finds it.
    pub fn parse(name: &str) -> Option<Language> {
        LANGUAGES
            .iter()
            .find(|(canonical, alias, _)| {
                canonical.eq_ignore_ascii_case(name) || alias.eq_ignore_ascii_case(name)
            })
            .map(|(_, _, language)| *language)
    }

    /// The canonical (lower-case, full) name.
    pub fn name(self) -> &'static str {
        LANGUAGES
            .iter()
            .find(|(_, _, language)| *language == self)
            .map_or("none", |(name, _, _)| name)
    }

    fn algorithm(self) -> Option<Algorithm> {
        Some(match self {
            Language::None => return None,
            Language::Danish => Algorithm::Danish,
            Language::Dutch => Algorithm::Dutch,
            Language::English => Algorithm::English,
            Language::Finnish => Algorithm::Finnish,
            Language::French => Algorithm::French,
            Language::German => Algorithm::German,
            Language::Hungarian => Algorithm::Hungarian,
            Language::Italian => Algorithm::Italian,
            Language::Norwegian => Algorithm::Norwegian,
            Language::Portuguese => Algorithm::Portuguese,
            Language::Romanian => Algorithm::Romanian,
            Language::Russian => Algorithm::Russian,
            Language::Spanish => Algorithm::Spanish,
            Language::Swedish => Algorithm::Swedish,
            Language::Turkish => Algorithm::Turkish,
        })
    }

    /// The Snowball stem of `word` (unchanged for `None`).
    pub(crate) fn stem(self, word: &str) -> String {
        match self.algorithm() {
            Some(algorithm) => Stemmer::create(algorithm).stem(word).into_owned(),
            None => word.to_string(),
        }
    }

    /// The language's stop words (lower case, diacritics kept); empty for `none` and Romanian.
    pub(crate) fn stop_words(self) -> &'static HashSet<&'static str> {
        static SETS: OnceLock<Vec<(Language, HashSet<&'static str>)>> = OnceLock::new();
        static EMPTY: OnceLock<HashSet<&'static str>> = OnceLock::new();
        let sets = SETS.get_or_init(|| {
            STOP_WORDS
                .iter()
                .map(|(language, data)| {
                    let words = data
                        .lines()
                        .map(str::trim)
                        .filter(|line| !line.is_empty() && !line.starts_with('#'))
                        .collect();
                    (*language, words)
                })
                .collect()
        });
        sets.iter()
            .find(|(language, _)| *language == self)
            .map_or_else(|| EMPTY.get_or_init(HashSet::new), |(_, words)| words)
    }
}

const STOP_WORDS: &[(Language, &str)] = &[
    (Language::Danish, include_str!("data/danish.txt")),
    (Language::Dutch, include_str!("data/dutch.txt")),
    (Language::English, include_str!("data/english.txt")),
    (Language::Finnish, include_str!("data/finnish.txt")),
    (Language::French, include_str!("data/french.txt")),
    (Language::German, include_str!("data/german.txt")),
    (Language::Hungarian, include_str!("data/hungarian.txt")),
    (Language::Italian, include_str!("data/italian.txt")),
    (Language::Norwegian, include_str!("data/norwegian.txt")),
    (Language::Portuguese, include_str!("data/portuguese.txt")),
    (Language::Russian, include_str!("data/russian.txt")),
    (Language::Spanish, include_str!("data/spanish.txt")),
    (Language::Swedish, include_str!("data/swedish.txt")),
    (Language::Turkish, include_str!("data/turkish.txt")),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_are_case_insensitive() {
        assert_eq!(Language::parse("English"), Some(Language::English));
        assert_eq!(Language::parse("EN"), Some(Language::English));
        assert_eq!(Language::parse("nb"), Some(Language::Norwegian));
        assert_eq!(Language::parse("none"), Some(Language::None));
        assert_eq!(Language::parse("klingon"), None);
        assert_eq!(Language::parse("ES").map(Language::name), Some("spanish"));
    }

    #[test]
    fn stems_and_stop_words() {
        assert_eq!(Language::English.stem("running"), "run");
        assert_eq!(Language::English.stem("coffee"), "coffe");
        assert_eq!(Language::None.stem("running"), "running");
        assert!(Language::English.stop_words().contains("the"));
        assert!(Language::English.stop_words().contains("can't"));
        assert_eq!(Language::English.stop_words().len(), 174);
        assert!(Language::Romanian.stop_words().is_empty());
        assert!(Language::Spanish.stop_words().contains("el"));
    }
}
