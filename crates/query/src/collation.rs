//! Collations: a `collation` document parsed, validated and resolved the way mongod's ICU
//! collator factory does it, and the ICU4X collator that compares strings and writes index
//! comparison keys under it.
//!
//! Invariants:
//! - The simple collation (`{locale: "simple"}`, or no collation at all) is `None` everywhere;
//!   a [`Collation`] is always a locale-aware one.
//! - [`Collation::spec`] is the resolved document mongod shows in `listIndexes` and
//!   `listCollections` (every option present, locale defaults filled in); two collations are
//!   equal exactly when their resolved specs are.
//! - `compare(a, b)` and the byte order of `comparison_key(a)` / `comparison_key(b)` agree, so
//!   an index of comparison keys answers exactly what the matcher answers.
//! - Locales are the ones mongod documents (its collation locale table); a variant ICU4X ships
//!   no data for is refused, never silently replaced by the root order.

use std::cmp::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use icu_collator::options::{AlternateHandling, CaseLevel, CollatorOptions, MaxVariable, Strength};
use icu_collator::preferences::{CollationCaseFirst, CollationNumericOrdering};
use icu_collator::{Collator, CollatorBorrowed, CollatorPreferences};
use icu_locale_core::Locale;

use tideway_base::display::{document_string, type_name};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The collator version tideway reports and accepts (`version` in a collation document).
pub(crate) const COLLATOR_VERSION: &str = "icu4x-2.4";

/// The locales of mongod's collation locale table, with the variants each offers
/// (`<locale>@collation=<variant>`).
const LOCALES: &[(&str, &[&str])] = &[
    ("af", &[]),
    ("sq", &[]),
    ("am", &[]),
    ("ar", &["compat"]),
    ("hy", &[]),
    ("as", &[]),
    ("az", &["search"]),
    ("be", &[]),
    ("bn", &["traditional"]),
    ("bs", &["search"]),
    ("bs_Cyrl", &[]),
    ("bg", &[]),
    ("my", &[]),
    ("ca", &["search"]),
    ("chr", &[]),
    ("zh", &["big5han", "gb2312han", "unihan", "zhuyin"]),
    ("zh_Hant", &[]),
    ("hr", &["search"]),
    ("cs", &["search"]),
    ("da", &["search"]),
    ("nl", &[]),
    ("dz", &[]),
    ("en", &[]),
    ("en_US", &[]),
    ("en_US_POSIX", &[]),
    ("eo", &[]),
    ("et", &[]),
    ("ee", &[]),
    ("fo", &[]),
    ("fil", &[]),
    ("fi", &["search", "traditional"]),
    ("fr", &[]),
    ("fr_CA", &[]),
    ("gl", &["search"]),
    ("ka", &[]),
    ("de", &["search", "eor", "phonebook"]),
    ("de_AT", &["phonebook"]),
    ("el", &[]),
    ("gu", &[]),
    ("ha", &[]),
    ("haw", &[]),
    ("he", &["search"]),
    ("hi", &[]),
    ("hu", &[]),
    ("is", &["search"]),
    ("ig", &[]),
    ("smn", &["search"]),
    ("id", &[]),
    ("ga", &[]),
    ("it", &[]),
    ("ja", &["unihan"]),
    ("kl", &["search"]),
    ("kn", &["traditional"]),
    ("kk", &[]),
    ("km", &[]),
    ("kok", &[]),
    ("ko", &["search", "searchjl", "unihan"]),
    ("ky", &[]),
    ("lkt", &[]),
    ("lo", &[]),
    ("lv", &[]),
    ("ln", &["phonetic"]),
    ("lt", &[]),
    ("dsb", &[]),
    ("lb", &[]),
    ("mk", &[]),
    ("ms", &[]),
    ("ml", &[]),
    ("mt", &[]),
    ("mr", &[]),
    ("mn", &[]),
    ("ne", &[]),
    ("se", &["search"]),
    ("nb", &["search"]),
    ("nn", &["search"]),
    ("or", &[]),
    ("om", &[]),
    ("ps", &[]),
    ("fa", &[]),
    ("fa_AF", &[]),
    ("pl", &[]),
    ("pt", &[]),
    ("pa", &[]),
    ("ro", &[]),
    ("ru", &[]),
    ("sr", &[]),
    ("sr_Latn", &["search"]),
    ("si", &["dictionary"]),
    ("sk", &["search"]),
    ("sl", &[]),
    ("es", &["search", "traditional"]),
    ("sw", &[]),
    ("sv", &["search"]),
    ("ta", &[]),
    ("te", &[]),
    ("th", &[]),
    ("bo", &[]),
    ("to", &[]),
    ("tr", &["search"]),
    ("uk", &[]),
    ("hsb", &[]),
    ("ur", &[]),
    ("ug", &[]),
    ("vi", &["traditional"]),
    ("wae", &[]),
    ("cy", &[]),
    ("yi", &["search"]),
    ("yo", &[]),
    ("zu", &[]),
];

/// ICU collation type names (as mongod's locale ids spell them) and their BCP 47 `co` values.
const VARIANT_TAGS: &[(&str, &str)] = &[
    ("big5han", "big5han"),
    ("compat", "compat"),
    ("dictionary", "dict"),
    ("eor", "eor"),
    ("gb2312han", "gb2312"),
    ("phonebook", "phonebk"),
    ("phonetic", "phonetic"),
    ("search", "search"),
    ("searchjl", "searchjl"),
    ("traditional", "trad"),
    ("unihan", "unihan"),
    ("zhuyin", "zhuyin"),
];

/// Locales whose tailoring turns on backwards secondary weighting (CLDR: French of Canada).
const BACKWARDS_LOCALES: &[&str] = &["fr_CA"];

/// A locale-aware collation: its resolved spec and the collator that implements it.
pub struct Collation {
    spec: Document,
    collator: CollatorBorrowed<'static>,
}

impl std::fmt::Debug for Collation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collation({})", document_string(&self.spec))
    }
}

impl PartialEq for Collation {
    fn eq(&self, other: &Collation) -> bool {
        self.spec == other.spec
    }
}

/// A collation option of a `collation` document, read as mongod's `bsonExtract*Field` reads it.
struct Options<'a> {
    spec: &'a Document,
    parsed: usize,
}

impl<'a> Options<'a> {
    fn take(&mut self, field: &str) -> Option<&'a Bson> {
        let value = self.spec.get(field)?;
        self.parsed += 1;
        Some(value)
    }

    fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
        CommandError::type_mismatch(format!(
            "\"{field}\" had the wrong type. Expected {expected}, found {}",
            type_name(value)
        ))
    }

    fn boolean(&mut self, field: &str) -> CommandResult<Option<bool>> {
        match self.take(field) {
            None => Ok(None),
            Some(Bson::Boolean(value)) => Ok(Some(*value)),
            Some(other) => Err(Options::wrong_type(field, other, "bool")),
        }
    }

    fn string(&mut self, field: &str) -> CommandResult<Option<&'a str>> {
        match self.take(field) {
            None => Ok(None),
            Some(Bson::String(value)) => Ok(Some(value.as_str())),
            Some(other) => Err(Options::wrong_type(field, other, "string")),
        }
    }

    /// A one-of-`allowed` string option: FailedToParse naming the choices otherwise.
    fn choice(&mut self, field: &str, allowed: &[&str]) -> CommandResult<Option<&'a str>> {
        let Some(value) = self.string(field)? else {
            return Ok(None);
        };
        if allowed.contains(&value) {
            return Ok(Some(value));
        }
        let quoted: Vec<String> = allowed.iter().map(|choice| format!("'{choice}'")).collect();
        let choices = match quoted.as_slice() {
            [first, second] => format!("{first} or {second}"),
            [rest @ .., last] => format!("{}, or {last}", rest.join(", ")),
            [] => String::new(),
        };
        Err(CommandError::new(
            ErrorCode::FailedToParse,
            format!("Field '{field}' must be {choices}. Got: {value}"),
        ))
    }

    fn integer(&mut self, field: &str) -> CommandResult<Option<i64>> {
        let Some(value) = self.take(field) else {
            return Ok(None);
        };
        let whole = match crate::numeric::Number::from_bson(value) {
            Some(number) => number.to_exact_i64(),
            None => return Err(Options::wrong_type(field, value, "number")),
        };
        whole.map(Some).ok_or_else(|| {
            CommandError::bad_value(format!(
                "Expected field \"{field}\" to have a value exactly representable as a 64-bit \
                 integer, but found {}",
                tideway_base::display::value_string(value)
            ))
        })
    }
}

impl Collation {
    /// Parses a `collation` document: `Ok(None)` for the simple collation, otherwise the
    /// resolved collation, or mongod's error for an invalid document.
    pub fn parse(spec: &Document) -> CommandResult<Option<Arc<Collation>>> {
        let locale = match spec.get("locale") {
            None => {
                return Err(CommandError::new(
                    ErrorCode::NoSuchKey,
                    "Missing expected field \"locale\"",
                ))
            }
            Some(Bson::String(locale)) => locale.as_str(),
            Some(other) => return Err(Options::wrong_type("locale", other, "string")),
        };
        if locale.contains('\0') {
            return Err(CommandError::bad_value(format!(
                "Field 'locale' cannot contain null byte. Collation spec: {}",
                document_string(spec)
            )));
        }
        if locale == "simple" {
            if spec.len() > 1 {
                return Err(CommandError::new(
                    ErrorCode::FailedToParse,
                    format!(
                        "If locale=simple, no other fields should be present in: {}",
                        document_string(spec)
                    ),
                ));
            }
            return Ok(None);
        }
        if locale.is_empty() {
            return Err(CommandError::bad_value(format!(
                "Field 'locale' cannot be the empty string in: {}",
                document_string(spec)
            )));
        }
        let tag = bcp47_tag(locale).ok_or_else(|| {
            CommandError::bad_value(format!(
                "Field 'locale' is invalid in: {}",
                document_string(spec)
            ))
        })?;
        let language: Locale = tag.parse().map_err(|_| {
            CommandError::bad_value(format!(
                "Field 'locale' is invalid in: {}",
                document_string(spec)
            ))
        })?;
        if !has_variant_data(&language) {
            return Err(CommandError::bad_value(format!(
                "tideway has no collation data for the locale '{locale}' (ICU4X ships no data \
                 for this collation variant) in: {}",
                document_string(spec)
            )));
        }
        let defaults = Collator::try_new((&language).into(), CollatorOptions::default())
            .map_err(|error| collator_failed(&error, spec))?
            .resolved_options();

        let mut options = Options { spec, parsed: 1 };
        let case_level = options.boolean("caseLevel")?;
        let case_first = options.choice("caseFirst", &["upper", "lower", "off"])?;
        let strength = match options.integer("strength")? {
            None => None,
            Some(level @ 1..=5) => Some(level as i32),
            Some(other) => {
                return Err(CommandError::new(
                    ErrorCode::FailedToParse,
                    format!("Field 'strength' must be an integer 1 through 5. Got: {other}"),
                ))
            }
        };
        let numeric_ordering = options.boolean("numericOrdering")?;
        let alternate = options.choice("alternate", &["non-ignorable", "shifted"])?;
        let max_variable = options.choice("maxVariable", &["punct", "space"])?;
        let normalization = options.boolean("normalization")?;
        let backwards = options.boolean("backwards")?;
        if let Some(version) = options.string("version")? {
            if version != COLLATOR_VERSION {
                return Err(CommandError::new(
                    ErrorCode::IncompatibleCollationVersion,
                    format!(
                        "Requested collation version {version} but the only available collator \
                         version was {COLLATOR_VERSION}. Requested collation spec: {}",
                        document_string(spec)
                    ),
                ));
            }
        }
        if options.parsed < spec.len() {
            return Err(CommandError::new(
                ErrorCode::FailedToParse,
                format!(
                    "Collation spec contains unknown field. Collation spec: {}",
                    document_string(spec)
                ),
            ));
        }

        let case_level = case_level.unwrap_or(defaults.case_level == CaseLevel::On);
        let case_first = case_first.unwrap_or(match defaults.case_first {
            CollationCaseFirst::Upper => "upper",
            CollationCaseFirst::Lower => "lower",
            _ => "off",
        });
        let strength = strength.unwrap_or(match defaults.strength {
            Strength::Primary => 1,
            Strength::Secondary => 2,
            Strength::Quaternary => 4,
            Strength::Identical => 5,
            _ => 3,
        });
        let numeric_ordering =
            numeric_ordering.unwrap_or(defaults.numeric == CollationNumericOrdering::True);
        let alternate = alternate.unwrap_or(match defaults.alternate_handling {
            AlternateHandling::Shifted => "shifted",
            _ => "non-ignorable",
        });
        let max_variable = max_variable.unwrap_or(match defaults.max_variable {
            MaxVariable::Space => "space",
            _ => "punct",
        });
        let locale_backwards = BACKWARDS_LOCALES.contains(&locale);
        let backwards = backwards.unwrap_or(locale_backwards);
        let resolved = doc! {
            "locale": locale,
            "caseLevel": case_level,
            "caseFirst": case_first,
            "strength": strength,
            "numericOrdering": numeric_ordering,
            "alternate": alternate,
            "maxVariable": max_variable,
            "normalization": normalization.unwrap_or(false),
            "backwards": backwards,
            "version": COLLATOR_VERSION,
        };
        if backwards && strength == 1 {
            return Err(CommandError::bad_value(format!(
                "'backwards' is invalid with 'strength' of 1 in: {}",
                document_string(&resolved)
            )));
        }
        if case_first != "off" && !case_level && strength <= 2 {
            return Err(CommandError::bad_value(format!(
                "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 \
                 in: {}",
                document_string(&resolved)
            )));
        }
        if backwards != locale_backwards {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!(
                    "tideway's collator (ICU4X) cannot set backwards secondary weighting: \
                     'backwards: {backwards}' is only available where the locale implies it \
                     (backwards is true exactly for {}) in: {}",
                    BACKWARDS_LOCALES.join(", "),
                    document_string(spec)
                ),
            ));
        }

        let mut preferences = CollatorPreferences::from(&language);
        preferences.case_first = Some(match case_first {
            "upper" => CollationCaseFirst::Upper,
            "lower" => CollationCaseFirst::Lower,
            _ => CollationCaseFirst::False,
        });
        preferences.numeric_ordering = Some(if numeric_ordering {
            CollationNumericOrdering::True
        } else {
            CollationNumericOrdering::False
        });
        let mut collator_options = CollatorOptions::default();
        collator_options.strength = Some(match strength {
            1 => Strength::Primary,
            2 => Strength::Secondary,
            3 => Strength::Tertiary,
            4 => Strength::Quaternary,
            _ => Strength::Identical,
        });
        collator_options.case_level = Some(if case_level {
            CaseLevel::On
        } else {
            CaseLevel::Off
        });
        collator_options.alternate_handling = Some(if alternate == "shifted" {
            AlternateHandling::Shifted
        } else {
            AlternateHandling::NonIgnorable
        });
        collator_options.max_variable = Some(if max_variable == "space" {
            MaxVariable::Space
        } else {
            MaxVariable::Punctuation
        });
        let collator = Collator::try_new(preferences, collator_options)
            .map_err(|error| collator_failed(&error, spec))?;
        Ok(Some(Arc::new(Collation {
            spec: resolved,
            collator,
        })))
    }

    /// Parses the `collation` argument of a command: `Ok(None)` when absent.
    pub fn from_argument(
        command: &str,
        value: Option<&Bson>,
    ) -> CommandResult<Option<CollationChoice>> {
        match value {
            None => Ok(None),
            Some(Bson::Document(spec)) => Ok(Some(Collation::parse(spec)?)),
            Some(other) => Err(CommandError::wrong_type(
                command,
                "collation",
                other,
                "object",
            )),
        }
    }

    /// The resolved spec, as mongod lists it.
    pub fn spec(&self) -> &Document {
        &self.spec
    }

    /// The order of two strings under this collation.
    pub fn compare(&self, a: &str, b: &str) -> Ordering {
        self.collator.compare(a, b)
    }

    /// The string an index stores for `text`: the collator's sort key in lowercase hex, so
    /// byte order of keys is collation order and the key stays a valid UTF-8 string.
    pub(crate) fn comparison_key(&self, text: &str) -> String {
        let mut sort_key: Vec<u8> = Vec::with_capacity(text.len() * 2 + 8);
        let Ok(()) = self.collator.write_sort_key_to(text, &mut sort_key);
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut key = String::with_capacity(sort_key.len() * 2);
        for byte in sort_key {
            key.push(char::from(HEX[usize::from(byte >> 4)]));
            key.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        key
    }

    /// `value` with every string (at any depth) replaced by its [`Self::comparison_key`]: the
    /// value an index with this collation encodes (mongod's collation-aware index key).
    pub fn index_value(&self, value: &Bson) -> Bson {
        match value {
            Bson::String(text) => Bson::String(self.comparison_key(text)),
            Bson::Symbol(text) => Bson::Symbol(self.comparison_key(text)),
            Bson::Document(document) => Bson::Document(
                document
                    .iter()
                    .map(|(name, value)| (name.clone(), self.index_value(value)))
                    .collect(),
            ),
            Bson::Array(elements) => Bson::Array(
                elements
                    .iter()
                    .map(|value| self.index_value(value))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// What a command's `collation` argument asked for: `None` is the simple collation.
pub type CollationChoice = Option<Arc<Collation>>;

/// The collation an operation runs with: its explicit `collation` if it gave one (the simple
/// collation included), else the collection's default.
pub fn effective(
    explicit: Option<CollationChoice>,
    collection_default: &CollationChoice,
) -> CollationChoice {
    explicit.unwrap_or_else(|| collection_default.clone())
}

/// Whether a value holds a string at any depth (what a collation can change the order of).
pub fn has_strings(value: &Bson) -> bool {
    match value {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(document) => document.values().any(has_strings),
        Bson::Array(elements) => elements.iter().any(has_strings),
        _ => false,
    }
}

/// Whether two collation choices are the same collation.
pub fn same(a: &CollationChoice, b: &CollationChoice) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn collator_failed(error: &impl std::fmt::Display, spec: &Document) -> CommandError {
    CommandError::new(
        ErrorCode::OperationFailed,
        format!(
            "Failed to create collator: {error}. Collation spec: {}",
            document_string(spec)
        ),
    )
}

/// mongod's locale id (`de_AT@collation=phonebook`) as a BCP 47 tag ICU4X reads
/// (`de-AT-u-co-phonebk`), when the locale is in mongod's table.
fn bcp47_tag(locale: &str) -> Option<String> {
    let (base, variant) = match locale.split_once("@collation=") {
        Some((base, variant)) => (base, Some(variant)),
        None => (locale, None),
    };
    let (_, variants) = LOCALES.iter().find(|(name, _)| *name == base)?;
    let mut tag = match base {
        "en_US_POSIX" => "en-US-posix".to_string(),
        other => other.replace('_', "-"),
    };
    if let Some(variant) = variant {
        if !variants.contains(&variant) {
            return None;
        }
        let (_, co) = VARIANT_TAGS.iter().find(|(name, _)| *name == variant)?;
        tag.push_str("-u-co-");
        tag.push_str(co);
    }
    Some(tag)
}

/// Whether ICU4X has tailoring data for the collation type (`-u-co-…`) the locale asks for;
/// a locale without one uses its language's data or the root order, both always present.
fn has_variant_data(locale: &Locale) -> bool {
    use icu_collator::provider::{Baked, CollationTailoringV1};
    use icu_provider::prelude::*;

    let Some(collation_type) = locale
        .extensions
        .unicode
        .keywords
        .iter()
        .find_map(|(key, value)| (key.as_str() == "co").then(|| value.to_string()))
    else {
        return true;
    };
    let Ok(attributes) = DataMarkerAttributes::try_from_str(&collation_type) else {
        return false;
    };
    let data_locale = DataLocale::from(locale);
    let request = DataRequest {
        id: DataIdentifierBorrowed::for_marker_attributes_and_locale(attributes, &data_locale),
        metadata: {
            let mut metadata = DataRequestMetadata::default();
            metadata.silent = true;
            metadata
        },
    };
    DataProvider::<CollationTailoringV1>::load(&Baked, request).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collation(spec: Document) -> Arc<Collation> {
        Collation::parse(&spec).unwrap().expect("not simple")
    }

    fn error(spec: Document) -> CommandError {
        Collation::parse(&spec).unwrap_err()
    }

    #[test]
    fn simple_is_none_and_takes_no_options() {
        assert!(Collation::parse(&doc! {"locale": "simple"})
            .unwrap()
            .is_none());
        assert_eq!(
            error(doc! {"locale": "simple", "strength": 2}).code,
            ErrorCode::FailedToParse
        );
    }

    #[test]
    fn resolved_spec_fills_locale_defaults() {
        // jstests/core/collation.js: the fr_CA and en_US specs as listCollections shows them.
        let fr_ca = collation(doc! {"locale": "fr_CA"});
        assert_eq!(
            fr_ca.spec(),
            &doc! {
                "locale": "fr_CA", "caseLevel": false, "caseFirst": "off", "strength": 3,
                "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
                "normalization": false, "backwards": true, "version": COLLATOR_VERSION,
            }
        );
        assert_eq!(
            collation(doc! {"locale": "en_US"})
                .spec()
                .get_bool("backwards"),
            Ok(false)
        );
        // collation-locales-defaults: Danish sorts upper case first, Thai shifts punctuation.
        assert_eq!(
            collation(doc! {"locale": "da"}).spec().get_str("caseFirst"),
            Ok("upper")
        );
        assert_eq!(
            collation(doc! {"locale": "th"}).spec().get_str("alternate"),
            Ok("shifted")
        );
    }

    #[test]
    fn invalid_documents_get_mongods_errors() {
        // jstests/core/collation.js: each of these fails.
        assert_eq!(error(doc! {}).code, ErrorCode::NoSuchKey);
        assert_eq!(error(doc! {"blah": 1}).code, ErrorCode::NoSuchKey);
        assert_eq!(
            error(doc! {"locale": "en", "blah": 1}).code,
            ErrorCode::FailedToParse
        );
        assert_eq!(error(doc! {"locale": "xx"}).code, ErrorCode::BadValue);
        assert_eq!(
            error(doc! {"locale": "en", "strength": 99}).code,
            ErrorCode::FailedToParse
        );
        assert_eq!(
            error(doc! {"locale": "en", "strength": 9.9}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            error(doc! {"locale": "en", "version": "unknownVersion"}).code,
            ErrorCode::IncompatibleCollationVersion
        );
        assert_eq!(
            error(doc! {"locale": "en", "caseFirst": "sideways"}).code,
            ErrorCode::FailedToParse
        );
        assert_eq!(
            error(doc! {"locale": "en", "caseLevel": "yes"}).code,
            ErrorCode::TypeMismatch
        );
        assert_eq!(
            error(doc! {"locale": "en", "strength": 1, "caseFirst": "upper"}).code,
            ErrorCode::BadValue
        );
        assert_eq!(
            error(doc! {"locale": "fr_CA", "strength": 1}).code,
            ErrorCode::BadValue
        );
        assert_eq!(error(doc! {"locale": ""}).code, ErrorCode::BadValue);
        assert_eq!(
            error(doc! {"locale": "de@collation=klingon"}).code,
            ErrorCode::BadValue
        );
    }

    #[test]
    fn variants_without_data_are_refused_and_others_change_the_order() {
        assert_eq!(
            error(doc! {"locale": "da@collation=search"}).code,
            ErrorCode::BadValue
        );
        // German phonebook order sorts "ä" as "ae": "Ärger" before "Alpha"'s "l".
        let phonebook = collation(doc! {"locale": "de@collation=phonebook"});
        let standard = collation(doc! {"locale": "de"});
        assert_eq!(phonebook.compare("Ärger", "Alpha"), Ordering::Less);
        assert_eq!(standard.compare("Ärger", "Alpha"), Ordering::Greater);
    }

    #[test]
    fn strength_numeric_ordering_and_alternate_change_comparisons() {
        // The collation reference page: strength 1 ignores case and diacritics, 2 only case.
        let primary = collation(doc! {"locale": "fr", "strength": 1});
        assert_eq!(primary.compare("cafe", "Café"), Ordering::Equal);
        let secondary = collation(doc! {"locale": "fr", "strength": 2});
        assert_eq!(secondary.compare("cafe", "CAFE"), Ordering::Equal);
        assert_ne!(secondary.compare("cafe", "café"), Ordering::Equal);
        let tertiary = collation(doc! {"locale": "en"});
        assert_eq!(tertiary.compare("a", "A"), Ordering::Less);
        let upper_first = collation(doc! {"locale": "en", "caseFirst": "upper"});
        assert_eq!(upper_first.compare("a", "A"), Ordering::Greater);
        let numeric = collation(doc! {"locale": "en", "numericOrdering": true});
        assert_eq!(numeric.compare("10", "9"), Ordering::Greater);
        assert_eq!(tertiary.compare("10", "9"), Ordering::Less);
        let shifted = collation(doc! {"locale": "en", "alternate": "shifted", "strength": 3});
        assert_eq!(shifted.compare("black-bird", "blackbird"), Ordering::Equal);
        assert_ne!(tertiary.compare("black-bird", "blackbird"), Ordering::Equal);
    }

    #[test]
    fn comparison_keys_order_like_compare() {
        let words = [
            "", "a", "A", "á", "b", "B", "ab", "aB", "10", "9", "côte", "coté", "Z", "zz", "ä",
        ];
        for spec in [
            doc! {"locale": "en"},
            doc! {"locale": "en", "strength": 2},
            doc! {"locale": "fr_CA"},
            doc! {"locale": "en", "numericOrdering": true, "caseFirst": "upper"},
        ] {
            let collation = collation(spec);
            for a in words {
                for b in words {
                    assert_eq!(
                        collation
                            .comparison_key(a)
                            .cmp(&collation.comparison_key(b)),
                        collation.compare(a, b),
                        "{a:?} vs {b:?} under {collation:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn backwards_is_honoured_only_where_the_locale_implies_it() {
        assert!(Collation::parse(&doc! {"locale": "fr_CA", "backwards": true}).is_ok());
        assert!(Collation::parse(&doc! {"locale": "fr", "backwards": false}).is_ok());
        assert_eq!(
            error(doc! {"locale": "fr", "backwards": true}).code,
            ErrorCode::NotImplemented
        );
        // fr_CA weighs the last accent difference first: "cote" < "côte" < "coté" < "côté".
        let fr_ca = collation(doc! {"locale": "fr_CA"});
        assert_eq!(fr_ca.compare("côte", "coté"), Ordering::Less);
        let fr = collation(doc! {"locale": "fr"});
        assert_eq!(fr.compare("côte", "coté"), Ordering::Greater);
    }
}
