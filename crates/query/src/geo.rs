//! The geospatial query operators of a filter: `$geoWithin` (and its old name `$within`) and
//! `$geoIntersects`, which test a document's values against a region, and `$near`,
//! `$nearSphere` (and the operator spelling `$geoNear`), which order documents by distance and
//! need a geo index to run. Parsing follows mongod's `GeoExpression::parseFrom` and
//! `GeoNearExpression::parseFrom` (codes and messages included); the geometry is `tideway_geo`'s.

use std::sync::Arc;

use bson::{Bson, Document};
use tideway_base::bsonutil::as_f64;
use tideway_base::display::value_string;
use tideway_base::error::{CommandError, CommandResult, ErrorCode};
use tideway_geo::point::{self, Crs, Position};
use tideway_geo::relate::{self, QueryRegion, Relation};
use tideway_geo::shape;

/// `$geoWithin` or `$geoIntersects` with its region.
#[derive(Debug)]
pub struct GeoMatch {
    pub relation: Relation,
    pub region: QueryRegion,
    /// The operator object as written (`{$geoWithin: {...}}`), for explain and plan shapes.
    pub raw: Document,
}

impl GeoMatch {
    /// Whether a value found at the predicate's path satisfies it: a geometry (invalid ones and
    /// non-objects never match, as with mongod) standing in the relation to the region.
    pub fn matches(&self, value: &Bson) -> bool {
        // Scalars are never geometries: skip the parser, which would format a refusal.
        if !matches!(value, Bson::Document(_) | Bson::Array(_)) {
            return false;
        }
        shape::parse_stored(value)
            .is_ok_and(|geometry| self.region.relates(self.relation, &geometry))
    }
}

/// `$near`, `$nearSphere` or `$geoNear` (the operator) with its point and distance bounds.
#[derive(Debug)]
pub struct NearQuery {
    /// The point distances are measured from: on the sphere for a GeoJSON point or any point
    /// of `$nearSphere`, on the plane for a legacy pair under `$near`.
    pub centroid: Position,
    /// Written as `$nearSphere`.
    pub is_near_sphere: bool,
    /// Distances (and the bounds) are in radians: a legacy pair under `$nearSphere`.
    pub units_are_radians: bool,
    pub min_distance: f64,
    pub max_distance: f64,
    pub raw: Document,
}

impl NearQuery {
    /// A query around `[0, 0]` on `crs` at any distance, before its arguments are read.
    fn unbounded(crs: Crs, raw: &Document) -> NearQuery {
        NearQuery {
            centroid: Position {
                x: 0.0,
                y: 0.0,
                crs,
            },
            is_near_sphere: false,
            units_are_radians: false,
            min_distance: 0.0,
            max_distance: f64::MAX,
            raw: raw.clone(),
        }
    }

    /// Whether the near point is on the sphere (needs a `2dsphere` index; on the plane, `2d`).
    pub fn is_spherical(&self) -> bool {
        self.centroid.crs == Crs::Sphere
    }
}

/// Whether `operator` starts a near query.
pub fn is_near_operator(operator: &str) -> bool {
    matches!(operator, "$near" | "$nearSphere" | "$geoNear")
}

/// Whether `operator` is `$geoWithin`, `$within` or `$geoIntersects`.
pub fn is_geo_operator(operator: &str) -> bool {
    matches!(operator, "$geoWithin" | "$within" | "$geoIntersects")
}

fn bad_value(message: impl Into<String>) -> CommandError {
    CommandError::bad_value(message)
}

fn element(name: &str, value: &Bson) -> String {
    format!("{name}: {}", value_string(value))
}

fn object(document: &Document) -> String {
    value_string(&Bson::Document(document.clone()))
}

/// `{$geoWithin: {<shape>: ...}}` or `{$geoIntersects: {$geometry: ...}}`: the whole operator
/// object of one path (`GeoExpression::parseQuery`), which holds nothing else.
pub fn parse_geo_match(operators: &Document) -> CommandResult<Arc<GeoMatch>> {
    let mut fields = operators.iter();
    let Some((operator, argument)) = fields.next() else {
        return Err(bad_value(format!(
            "invalid geo query predicate: {}",
            object(operators)
        )));
    };
    if let Some((extra, value)) = fields.next() {
        return Err(bad_value(format!(
            "can't parse extra field: {}",
            element(extra, value)
        )));
    }
    let relation = match operator.as_str() {
        "$geoIntersects" => Relation::Intersects,
        "$geoWithin" | "$within" => Relation::Within,
        _ => {
            return Err(bad_value(format!(
                "invalid geo query predicate: {}",
                object(operators)
            )))
        }
    };
    let Bson::Document(shapes) = argument else {
        return Err(bad_value("geometry must be an object"));
    };
    let mut region = None;
    for (specifier, value) in shapes {
        if region.is_some() && operator == "$geoWithin" {
            return Err(bad_value(format!(
                "$geoWithin doesn't accept multiple shapes {}",
                element(operator, argument)
            )));
        }
        // `$uniqueDocs` is deprecated and ignored.
        if specifier == "$uniqueDocs" {
            continue;
        }
        region =
            Some(relate::parse_region(specifier, value).map_err(|reason| bad_value(reason.0))?);
    }
    let Some(region) = region else {
        return Err(bad_value("geo query doesn't have any geometry"));
    };
    if relation == Relation::Within && !region.has_area() {
        return Err(bad_value(format!(
            "$within not supported with provided geometry: {}",
            object(operators)
        )));
    }
    if relation == Relation::Intersects && !region.is_spherical() {
        return Err(bad_value(format!(
            "$geoIntersect not supported with provided geometry: {}",
            object(operators)
        )));
    }
    Ok(Arc::new(GeoMatch {
        relation,
        region,
        raw: operators.clone(),
    }))
}

/// A near query: the whole operator object of its path (`GeoNearExpression::parseFrom`), in
/// the legacy form (`{$near: [x, y], $maxDistance: d}`, `{$near: [x, y, d]}`, a GeoJSON point
/// directly under the operator) or the GeoJSON one (`{$near: {$geometry, $minDistance,
/// $maxDistance}}`).
pub fn parse_near(operators: &Document) -> CommandResult<Arc<NearQuery>> {
    let mut near = match parse_legacy_near(operators)? {
        Some(near) => near,
        None => parse_geojson_near(operators)?,
    };
    if near.is_near_sphere {
        if near.centroid.on_sphere().is_none() {
            return Err(bad_value(
                "Legacy point is out of bounds for spherical query",
            ));
        }
        near.units_are_radians = near.centroid.crs == Crs::Flat;
        near.centroid.crs = Crs::Sphere;
    }
    Ok(Arc::new(near))
}

fn located(code: ErrorCode, message: &str) -> CommandError {
    CommandError::new(code, message)
}

/// `parseLegacyQuery`: `None` when no legacy point was found.
fn parse_legacy_near(operators: &Document) -> CommandResult<Option<NearQuery>> {
    let mut near = NearQuery::unbounded(Crs::Flat, operators);
    let mut found = false;
    for (field, value) in operators {
        match field.as_str() {
            operator if is_near_operator(operator) => {
                if !matches!(value, Bson::Document(_) | Bson::Array(_)) {
                    return Ok(None);
                }
                let point = match point::query_point(value) {
                    Ok(point) => Some(point),
                    Err(_) => point_with_max_distance(value).map(|(point, max)| {
                        near.max_distance = max;
                        point
                    }),
                };
                if let Some(point) = point {
                    if !is_non_negative(near.max_distance) {
                        return Err(located(
                            ErrorCode::Location18522,
                            "max distance must be non-negative",
                        ));
                    }
                    near.centroid = point;
                    near.is_near_sphere = operator == "$nearSphere";
                    found = true;
                }
            }
            "$minDistance" => {
                near.min_distance = legacy_distance(
                    value,
                    (ErrorCode::Location16893, "$minDistance must be a number"),
                    (
                        ErrorCode::Location16894,
                        "$minDistance must be non-negative",
                    ),
                )?;
            }
            "$maxDistance" => {
                near.max_distance = legacy_distance(
                    value,
                    (ErrorCode::Location16895, "$maxDistance must be a number"),
                    (
                        ErrorCode::Location16896,
                        "$maxDistance must be non-negative",
                    ),
                )?;
            }
            // Deprecated and ignored.
            "$uniqueDocs" => {}
            other => {
                return Err(CommandError::new(
                    ErrorCode::Location34413,
                    format!("invalid argument in geo near query: {other}"),
                ))
            }
        }
    }
    Ok(found.then_some(near))
}

/// Not NaN and not below zero.
fn is_non_negative(value: f64) -> bool {
    value >= 0.0
}

/// A `$minDistance`/`$maxDistance` of the legacy form, with mongod's assertion codes for a
/// value that is not a number and one that is negative.
fn legacy_distance(
    value: &Bson,
    not_number: (ErrorCode, &str),
    negative: (ErrorCode, &str),
) -> CommandResult<f64> {
    let distance = as_f64(value).ok_or_else(|| located(not_number.0, not_number.1))?;
    if !is_non_negative(distance) {
        return Err(located(negative.0, negative.1));
    }
    Ok(distance)
}

/// `[x, y, maxDistance]` (or an object of three numbers).
fn point_with_max_distance(value: &Bson) -> Option<(Position, f64)> {
    let values = point::listed_values(value)?;
    let [x, y, max] = values.as_slice() else {
        return None;
    };
    Some((
        Position {
            x: as_f64(x)?,
            y: as_f64(y)?,
            crs: Crs::Flat,
        },
        as_f64(max)?,
    ))
}

/// `parseNewQuery`: `{$near: {$geometry: <GeoJSON point>, $minDistance, $maxDistance}}`.
fn parse_geojson_near(operators: &Document) -> CommandResult<NearQuery> {
    let mut fields = operators.iter();
    let Some((operator, argument)) = fields.next() else {
        return Err(bad_value("empty geo near query object"));
    };
    if let Some((extra, value)) = fields.next() {
        return Err(bad_value(format!(
            "geo near accepts just one argument when querying for a GeoJSON point. Extra field found: {}",
            element(extra, value)
        )));
    }
    let Bson::Document(arguments) = argument else {
        return Err(bad_value("geo near query argument is not an object"));
    };
    if !is_near_operator(operator) {
        return Err(bad_value(format!(
            "invalid geo near query operator: {operator}"
        )));
    }
    let valid = |value: f64| value >= 0.0 && value.is_finite();
    let mut near = NearQuery::unbounded(Crs::Sphere, operators);
    near.is_near_sphere = operator == "$nearSphere";
    let mut found = false;
    for (field, value) in arguments {
        match field.as_str() {
            "$geometry" => {
                let Bson::Document(geometry) = value else {
                    continue;
                };
                let point = point::query_point(value).map_err(|reason| {
                    bad_value(format!(
                        "invalid point in geo near query $geometry argument: {}  {reason}",
                        object(geometry)
                    ))
                })?;
                if point.crs != Crs::Sphere {
                    return Err(bad_value(format!(
                        "$near requires geojson point, given {}",
                        object(geometry)
                    )));
                }
                near.centroid = point;
                found = true;
            }
            "$minDistance" | "$maxDistance" => {
                let distance =
                    as_f64(value).ok_or_else(|| bad_value(format!("{field} must be a number")))?;
                if !valid(distance) {
                    return Err(bad_value(format!("{field} must be non-negative")));
                }
                if field == "$minDistance" {
                    near.min_distance = distance;
                } else {
                    near.max_distance = distance;
                }
            }
            other => {
                return Err(bad_value(format!(
                    "invalid argument in geo near query: {other}"
                )))
            }
        }
    }
    if !found {
        return Err(bad_value("$geometry is required for geo near query"));
    }
    Ok(near)
}

/// mongod's message for a near query in a context that cannot sort by distance (aggregation
/// `$match`, `$lookup`, validators, partial indexes, views).
pub fn near_not_allowed() -> CommandError {
    CommandError::new(
        ErrorCode::Location5626500,
        "$geoNear, $near, and $nearSphere are not allowed in this context, as these operators require sorting geospatial data. If you do not need sort, consider using $geoWithin instead. Check out https://dochub.mongodb.org/core/near-sort-operation and https://dochub.mongodb.org/core/nearSphere-sort-operationfor more details.",
    )
}
