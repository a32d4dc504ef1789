//! Behaviour pinned from MongoDB's manual ($text, text search scores) and mongod's fts source.

use super::*;
use bson::doc;

fn index(spec: Document) -> TextIndex {
    TextIndex::from_spec(&spec).expect("valid text spec")
}

fn subject_index() -> TextIndex {
    index(doc! {
        "v": 2, "key": {"_fts": "text", "_ftsx": 1}, "name": "subject_text",
        "weights": {"subject": 1}, "default_language": "english",
        "language_override": "language", "textIndexVersion": 3,
    })
}

/// The manual's `articles` collection.
fn articles() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "subject": "coffee", "author": "xyz", "views": 50},
        doc! {"_id": 2, "subject": "Coffee Shopping", "author": "efg", "views": 5},
        doc! {"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90},
        doc! {"_id": 4, "subject": "baking", "author": "xyz", "views": 100},
        doc! {"_id": 5, "subject": "Café Con Leche", "author": "abc", "views": 200},
        doc! {"_id": 6, "subject": "Сырники", "author": "jkl", "views": 80},
        doc! {"_id": 7, "subject": "coffee and cream", "author": "efg", "views": 10},
        doc! {"_id": 8, "subject": "Cafe con Leche", "author": "xyz", "views": 10},
    ]
}

fn query(argument: Document) -> TextQuery {
    TextQuery::parse(&Bson::Document(argument)).expect("valid $text")
}

/// The ids of the articles matching, in collection order.
fn matching(argument: Document) -> Vec<i32> {
    let index = subject_index();
    let query = query(argument);
    articles()
        .iter()
        .filter(|document| index.score(&query, document).is_some())
        .map(|document| document.get_i32("_id").unwrap())
        .collect()
}

#[test]
fn parse_errors_are_mongods() {
    let error = |argument: Bson| TextQuery::parse(&argument).unwrap_err();
    let e = error(Bson::Int32(1));
    assert_eq!(
        (e.code, e.errmsg.as_str()),
        (ErrorCode::BadValue, "$text expects an object")
    );
    let e = error(Bson::Document(doc! {}));
    assert_eq!(
        (e.code, e.errmsg.as_str()),
        (ErrorCode::NoSuchKey, "Missing expected field \"$search\"")
    );
    let e = error(Bson::Document(doc! {"$search": Bson::Null}));
    assert_eq!(
        (e.code, e.errmsg.as_str()),
        (
            ErrorCode::TypeMismatch,
            "\"$search\" had the wrong type. Expected string, found null"
        )
    );
    let e = error(Bson::Document(doc! {"$search": "a", "$caseSensitive": 0}));
    assert_eq!(
        e.errmsg,
        "\"$caseSensitive\" had the wrong type. Expected bool, found int"
    );
    let e = error(Bson::Document(
        doc! {"$search": "a", "$language": "spanglish"},
    ));
    assert_eq!(
        (e.code, e.errmsg.as_str()),
        (
            ErrorCode::BadValue,
            "unsupported language: \"spanglish\" for text index version 3"
        )
    );
    let e = error(Bson::Document(doc! {"$search": "a", "$foo": 1}));
    assert_eq!(
        (e.code, e.errmsg.as_str()),
        (ErrorCode::BadValue, "extra fields in $text")
    );
    let parsed = query(doc! {"$search": "a", "$language": "ES", "$diacriticSensitive": true});
    assert_eq!(parsed.language, Some(Language::Spanish));
    assert!(parsed.diacritic_sensitive && !parsed.case_sensitive);
}

#[test]
fn search_strings_split_into_terms_phrases_and_negations() {
    let index = subject_index();
    let search = query(doc! {"$search": "coffee -shop \"Café con\" -\"no way\" - leche-cream"})
        .resolve(&index);
    assert_eq!(
        search.terms_for_bounds,
        ["cafe", "coffe", "con", "cream", "lech"]
            .map(String::from)
            .into()
    );
    assert_eq!(search.negated_terms, ["shop".to_string()].into());
    assert_eq!(search.positive_phrases, vec!["Café con".to_string()]);
    assert_eq!(search.negated_phrases, vec!["no way".to_string()]);
    // Stop words are never terms.
    assert!(query(doc! {"$search": "the a an"})
        .terms_to_scan(&index)
        .is_empty());
}

/// The manual: `{$text: {$search: "cake"}}` scores "Baking a cake" 0.75.
#[test]
fn score_of_the_manuals_cake_example() {
    let index = subject_index();
    let cake = query(doc! {"$search": "cake"});
    let scores: Vec<(i32, f64)> = articles()
        .iter()
        .filter_map(|d| Some((d.get_i32("_id").unwrap(), index.score(&cake, d)?)))
        .collect();
    assert_eq!(scores, vec![(3, 0.75)]);
}

#[test]
fn scoring_formula_is_mongods() {
    let index = subject_index();
    // One token equal to the whole string: coefficient 1, boost 1.1.
    let cake = query(doc! {"$search": "cake"});
    assert_eq!(index.score(&cake, &doc! {"subject": "cake"}), Some(1.1));
    // Repeats: frequency 1 + 1/2, coefficient 0.5 * 2/3 + 0.5.
    let score = index
        .score(&cake, &doc! {"subject": "cake cake pie"})
        .unwrap();
    assert!((score - 1.5 * (0.5 * 2.0 / 3.0 + 0.5)).abs() < 1e-12);
    // Weights multiply; arrays score each string.
    let weighted = index_with_weights(doc! {"subject": 10, "tags": 2});
    let score = weighted
        .score(
            &cake,
            &doc! {"subject": "cake", "tags": ["cake", "cake pie"]},
        )
        .unwrap();
    assert!((score - (10.0 * 1.1 + 2.0 * 1.1 + 2.0 * 0.75)).abs() < 1e-12);
    // Several query terms add up.
    let both = query(doc! {"$search": "cake pie"});
    assert_eq!(index.score(&both, &doc! {"subject": "cake pie"}), Some(1.5));
}

fn index_with_weights(weights: Document) -> TextIndex {
    index(doc! {
        "key": {"_fts": "text", "_ftsx": 1}, "weights": weights,
        "default_language": "english", "language_override": "language", "textIndexVersion": 3,
    })
}

/// The manual's $text examples over the articles collection.
#[test]
fn matching_follows_the_manual() {
    assert_eq!(matching(doc! {"$search": "coffee"}), vec![1, 2, 7]);
    assert_eq!(
        matching(doc! {"$search": "bake coffee cake"}),
        vec![1, 2, 3, 4, 7]
    );
    assert_eq!(matching(doc! {"$search": "\"coffee shop\""}), vec![2]);
    assert_eq!(matching(doc! {"$search": "coffee -shop"}), vec![1, 7]);
    assert_eq!(
        matching(doc! {"$search": "Coffee", "$caseSensitive": true}),
        vec![2]
    );
    assert_eq!(
        matching(doc! {"$search": "\"Café Con\"", "$caseSensitive": true}),
        vec![5]
    );
    assert_eq!(
        matching(doc! {"$search": "CAFÉ", "$diacriticSensitive": true}),
        vec![5]
    );
    assert_eq!(matching(doc! {"$search": "café"}), vec![5, 8]);
    assert_eq!(
        matching(doc! {"$search": "сырники", "$language": "ru"}),
        Vec::<i32>::new()
    );
    assert_eq!(
        matching(doc! {"$search": "сырники", "$language": "none"}),
        vec![6]
    );
}

#[test]
fn language_override_and_wildcard_fields() {
    let all = index(doc! {
        "key": {"_fts": "text", "_ftsx": 1}, "weights": {"$**": 1},
        "default_language": "english", "language_override": "idioma", "textIndexVersion": 3,
    });
    assert!(all.wildcard);
    let document = doc! {"a": {"b": "running"}, "idioma": "spanish", "c": ["corriendo"]};
    let terms = all.terms(&document).unwrap();
    // Spanish stemming for the whole document; the override field itself is not indexed.
    assert!(terms.contains(&Language::Spanish.stem("running")));
    assert!(terms.contains(&Language::Spanish.stem("corriendo")));
    assert!(!terms.iter().any(|t| t == "spanish"));
    let error = all.terms(&doc! {"idioma": "klingon"}).unwrap_err();
    assert_eq!(
        (error.code, error.errmsg.as_str()),
        (
            ErrorCode::Location17262,
            "language override unsupported: klingon"
        )
    );
    let error = all.terms(&doc! {"idioma": 1}).unwrap_err();
    assert_eq!(error.code, ErrorCode::Location17261);
    // Only the weighted paths of a non-wildcard index.
    let nested = index_with_weights(doc! {"a.b": 1});
    assert_eq!(
        nested
            .terms(&doc! {"a": {"b": "cakes", "c": "pies"}, "b": "tarts"})
            .unwrap(),
        vec!["cake".to_string()]
    );
}

#[test]
fn compound_text_spec_fields() {
    let compound = index(doc! {
        "key": {"a": 1, "_fts": "text", "_ftsx": 1, "z": -1}, "weights": {"t": 1},
        "default_language": "none", "language_override": "language", "textIndexVersion": 3,
    });
    assert_eq!(compound.prefix_fields, vec![("a".to_string(), 1)]);
    assert_eq!(compound.suffix_fields, vec![("z".to_string(), -1)]);
    assert_eq!(compound.default_language, Language::None);
    assert_eq!(
        compound.terms(&doc! {"t": "Running the Tests"}).unwrap(),
        vec![
            "running".to_string(),
            "tests".to_string(),
            "the".to_string()
        ]
    );
}

fn key_index(key: Document, weights: Document) -> TextIndex {
    index(doc! {
        "key": key, "weights": weights, "default_language": "english",
        "language_override": "language", "textIndexVersion": 3,
    })
}

fn text_key() -> Document {
    doc! {"_fts": "text", "_ftsx": 1}
}

/// Expectations of mongod's FTSSpec unit tests (scoreDocument).
#[test]
fn score_document_matches_mongods_tests() {
    let title = key_index(text_key(), doc! {"title": 10});
    let m = title.term_scores(&doc! {"title": "cat sat run"}).unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m["cat"], m["sat"]);
    assert_eq!(m["cat"], m["run"]);
    assert!(m["cat"] > 0.0);

    let two = key_index(text_key(), doc! {"title": 10, "text": 1});
    let m = two
        .term_scores(&doc! {"title": "cat sat run", "text": "cat book"})
        .unwrap();
    assert_eq!(m.len(), 4);
    assert_eq!(m["sat"], m["run"]);
    assert!(m["cat"] > m["sat"] && m["cat"] > m["book"]);
    assert!(m["book"] > 0.0 && m["book"] < m["sat"]);

    let m = title
        .term_scores(&doc! {"title": "cat sat sat run run run"})
        .unwrap();
    assert_eq!(m.len(), 3);
    assert!(m["cat"] > 0.0 && m["sat"] > m["cat"] && m["run"] > m["sat"]);

    let parent = key_index(text_key(), doc! {"a": 1, "a.b": 1});
    assert_eq!(
        parent
            .term_scores(&doc! {"a": {"b": "term"}})
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn nested_arrays_and_languages_match_mongods_tests() {
    let ab = key_index(text_key(), doc! {"a.b": 1});
    assert_eq!(ab.terms(&doc! {"a": [{"b": ["term"]}]}).unwrap().len(), 1);
    assert!(ab.terms(&doc! {"a": {"b": [["term"]]}}).unwrap().is_empty());
    let all = key_index(text_key(), doc! {"$**": 1});
    assert_eq!(all.terms(&doc! {"a": {"b": [["term"]]}}).unwrap().len(), 1);

    let abc = key_index(text_key(), doc! {"a.b.c": 1});
    let per_item = doc! {"a": {"b": [
        {"c": "walked", "language": "english"},
        {"c": "camminato", "language": "italian"},
        {"c": "ging", "language": "german"},
    ]}};
    assert_eq!(abc.terms(&per_item).unwrap(), ["cammin", "ging", "walk"]);
    let per_subdocument = doc! {"language": "english", "a": {"language": "danish", "b": [
        {"c": "foredrag"}, {"c": "foredragsholder"}, {"c": "lector"},
    ]}};
    assert_eq!(
        abc.terms(&per_subdocument).unwrap(),
        ["foredrag", "foredragshold", "lector"]
    );
    let nested = doc! {"language": "english", "a": [{"language": "danish", "b": [
        {"c": ["foredrag"]}, {"c": ["foredragsholder"]}, {"c": ["lector"]},
    ]}]};
    assert_eq!(
        abc.terms(&nested).unwrap(),
        ["foredrag", "foredragshold", "lector"]
    );
    let wildcard = doc! {"language": "english", "b": "walking", "c": {"e": "walked"},
    "d": {"language": "danish", "e": [
        {"f": "foredrag"}, {"f": "foredragsholder"}, {"f": "lector"},
    ]}};
    assert_eq!(
        all.terms(&wildcard).unwrap(),
        ["foredrag", "foredragshold", "lector", "walk"]
    );
    // Two-letter codes are languages: "the" is an English stop word.
    let a = key_index(text_key(), doc! {"a": 1});
    assert!(a
        .terms(&doc! {"a": "the", "language": "EN"})
        .unwrap()
        .is_empty());
}
