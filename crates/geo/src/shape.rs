//! Geometries as mongod parses them (`GeoParser`, `GeometryContainer::parseFromStorage`): every
//! GeoJSON type with mongod's checks and messages (closed rings of three distinct vertices, no
//! crossing edges, holes inside the shell, winding ignored unless the strict-winding `crs` makes a
//! "big polygon"), and legacy coordinate pairs. A parsed [`Geometry`] holds the S2 objects the
//! relations (`crate::relate`) and index keys work with.
//!
//! Invariants: GeoJSON cannot nest deeper than a `GeometryCollection` of geometries (a nested
//! collection is refused), so parsing recurses at most one level; every S2 object is built only
//! from vertices that passed the checks S2 itself assumes (unit length, no adjacent duplicates,
//! at least 2 vertices for a line and 3 for a loop), so the library's own assertions never fire.

use std::collections::HashMap;
use std::ops::ControlFlow;

use bson::{Bson, Document};
use s2rst::s2::crossing_edge_query::CrossingType;
use s2rst::s2::polyline::Polyline;
use s2rst::s2::shape_util::visit_crossing_edge_pairs;
use s2rst::s2::{Cell, LatLng, Loop, Point, Polygon};
use tideway_base::display::{type_name, value_string};

use crate::point::{self, type_name_of, Crs, Position};
use crate::Invalid;

/// A stored point: where it is and, when it is on the sphere (GeoJSON, or a legacy pair that is
/// a valid longitude and latitude), its S2 point and the level-30 cell holding it (mongod
/// compares points as these cells, "tiny squares" of about a centimetre).
#[derive(Clone, Debug)]
pub struct GeoPoint {
    pub position: Position,
    pub sphere: Option<(Point, Cell)>,
}

impl GeoPoint {
    pub fn new(position: Position) -> GeoPoint {
        match position.on_sphere() {
            Some(point) => GeoPoint::on_sphere(position, point),
            None => GeoPoint {
                position,
                sphere: None,
            },
        }
    }

    /// A position already put on the sphere at `point`.
    fn on_sphere(position: Position, point: Point) -> GeoPoint {
        GeoPoint {
            position,
            sphere: Some((point, Cell::from_point(point))),
        }
    }
}

/// A parsed geometry.
#[derive(Clone, Debug)]
pub enum Geometry {
    Point(GeoPoint),
    LineString(Polyline),
    Polygon(Polygon),
    /// A polygon whose interior is left of its one ring, whatever its size (strict winding crs).
    BigPolygon(Polygon),
    MultiPoint(Vec<GeoPoint>),
    MultiLineString(Vec<Polyline>),
    MultiPolygon(Vec<Polygon>),
    /// Never holds another collection.
    Collection(Vec<Geometry>),
}

impl Geometry {
    /// Whether the geometry is on the plane (only a legacy point is).
    pub fn is_flat(&self) -> bool {
        matches!(self, Geometry::Point(point) if point.position.crs == Crs::Flat)
    }
}

/// A value stored in a document, as a geometry: an array, or an object whose first value is a
/// number, is a legacy point (further values ignored); any other object is GeoJSON.
pub fn parse_stored(value: &Bson) -> Result<Geometry, Invalid> {
    match value {
        Bson::Document(document) if !point::is_legacy_pair(value) => parse_geojson(document),
        Bson::Array(_) | Bson::Document(_) => {
            point::stored_point(value).map(|p| Geometry::Point(GeoPoint::new(p)))
        }
        other => Err(Invalid(format!(
            "geo element must be an array or object: {}",
            value_string(other)
        ))),
    }
}

/// A GeoJSON object (`GeometryContainer::parseFromGeoJSON`).
pub fn parse_geojson(document: &Document) -> Result<Geometry, Invalid> {
    match geojson_type(document) {
        Some("GeometryCollection") => parse_collection(document),
        Some(kind) => parse_simple(kind, document),
        None => Err(unknown_type(document)),
    }
}

fn unknown_type(document: &Document) -> Invalid {
    Invalid(format!(
        "unknown GeoJSON type: {}",
        value_string(&Bson::Document(document.clone()))
    ))
}

/// The `type` of a GeoJSON object when it is one of the GeoJSON types.
fn geojson_type(document: &Document) -> Option<&'static str> {
    match document.get("type") {
        Some(Bson::String(kind)) => point::GEOJSON_TYPES
            .iter()
            .find(|known| **known == kind.as_str())
            .copied(),
        _ => None,
    }
}

/// Every GeoJSON type but `GeometryCollection`.
fn parse_simple(kind: &str, document: &Document) -> Result<Geometry, Invalid> {
    let coordinates = document.get("coordinates");
    match kind {
        "Point" => point::geojson_point(document).map(|p| Geometry::Point(GeoPoint::new(p))),
        "LineString" => {
            sphere_only(document)?;
            line(coordinates).map(Geometry::LineString)
        }
        "Polygon" => match point::crs(document)? {
            Crs::StrictSphere => big_polygon(coordinates).map(Geometry::BigPolygon),
            _ => polygon(coordinates).map(Geometry::Polygon),
        },
        "MultiPoint" => {
            sphere_only(document)?;
            let points = positions(coordinates)?;
            if points.is_empty() {
                return Err(Invalid(
                    "MultiPoint coordinates must have at least 1 element".into(),
                ));
            }
            Ok(Geometry::MultiPoint(
                points
                    .into_iter()
                    .map(|(position, point)| GeoPoint::on_sphere(position, point))
                    .collect(),
            ))
        }
        "MultiLineString" => {
            sphere_only(document)?;
            members(coordinates, "MultiLineString", line).map(Geometry::MultiLineString)
        }
        "MultiPolygon" => {
            sphere_only(document)?;
            members(coordinates, "MultiPolygon", polygon).map(Geometry::MultiPolygon)
        }
        _ => Err(unknown_type(document)),
    }
}

/// A `GeometryCollection` (`GeoParser::parseGeometryCollection`).
fn parse_collection(document: &Document) -> Result<Geometry, Invalid> {
    let geometries = match document.get("geometries") {
        Some(Bson::Array(geometries)) => geometries,
        other => {
            return Err(Invalid(format!(
                "GeometryCollection geometries must be an array, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    if geometries.is_empty() {
        return Err(Invalid(
            "GeometryCollection geometries must have at least 1 element".into(),
        ));
    }
    let mut parts = Vec::with_capacity(geometries.len());
    for (position, member) in geometries.iter().enumerate() {
        let Bson::Document(object) = member else {
            return Err(Invalid(format!(
                "Element {position} of \"geometries\" must be an object, instead got type {}: {}",
                type_name(member),
                value_string(member)
            )));
        };
        match geojson_type(object) {
            None => {
                return Err(Invalid(format!(
                    "Unknown GeoJSON type: {}",
                    value_string(member)
                )))
            }
            Some("GeometryCollection") => {
                return Err(Invalid(format!(
                    "GeometryCollections cannot be nested: {}",
                    value_string(member)
                )))
            }
            Some(kind) => parts.push(parse_simple(kind, object)?),
        }
    }
    Ok(Geometry::Collection(parts))
}

/// Types other than `Polygon` refuse the strict winding crs.
fn sphere_only(document: &Document) -> Result<(), Invalid> {
    match point::crs(document)? {
        Crs::StrictSphere => Err(Invalid(
            "Strict winding order CRS is only supported by polygon".into(),
        )),
        _ => Ok(()),
    }
}

/// The members of a `Multi*` geometry's `coordinates` array (at least one), each parsed by
/// `parse` (the first refusal reports).
fn members<T>(
    coordinates: Option<&Bson>,
    kind: &str,
    parse: fn(Option<&Bson>) -> Result<T, Invalid>,
) -> Result<Vec<T>, Invalid> {
    let members = match coordinates {
        Some(Bson::Array(members)) => members,
        other => {
            return Err(Invalid(format!(
                "{kind} coordinates must be an array, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    let parsed = members
        .iter()
        .map(|member| parse(Some(member)))
        .collect::<Result<Vec<T>, _>>()?;
    if parsed.is_empty() {
        return Err(Invalid(format!(
            "{kind} coordinates must have at least 1 element"
        )));
    }
    Ok(parsed)
}

/// An array of GeoJSON positions (`parseArrayOfCoordinates`): each an array of a longitude and
/// a latitude (further values kept unread), with its S2 point.
fn positions(coordinates: Option<&Bson>) -> Result<Vec<(Position, Point)>, Invalid> {
    let items = match coordinates {
        Some(Bson::Array(items)) => items,
        other => {
            return Err(Invalid(format!(
                "GeoJSON coordinates must be an array of coordinates, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    items
        .iter()
        .map(|item| {
            if !matches!(item, Bson::Array(_)) {
                return Err(Invalid(format!(
                    "GeoJSON coordinates must be an array, instead got type {}",
                    type_name(item)
                )));
            }
            let mut position = point::stored_point(item)?;
            let sphere = point::sphere_point(position.x, position.y)?;
            position.crs = Crs::Sphere;
            Ok((position, sphere))
        })
        .collect()
}

/// Vertices without consecutive repeats (`eraseDuplicatePoints`).
fn without_repeats(mut vertices: Vec<Point>) -> Vec<Point> {
    vertices.dedup();
    vertices
}

/// A value as mongod prints an element's value, `EOO` for a missing one.
pub(crate) fn rendered(value: Option<&Bson>) -> String {
    value.map_or_else(|| "EOO".to_string(), value_string)
}

/// A LineString's `coordinates` (`parseGeoJSONLineCoordinates`).
fn line(coordinates: Option<&Bson>) -> Result<Polyline, Invalid> {
    let vertices = without_repeats(
        positions(coordinates)?
            .into_iter()
            .map(|(_, p)| p)
            .collect(),
    );
    if vertices.len() < 2 {
        return Err(Invalid(format!(
            "GeoJSON LineString must have at least 2 vertices, instead got {} vertices: {}",
            vertices.len(),
            rendered(coordinates)
        )));
    }
    if let Some(i) = (1..vertices.len()).find(|&i| vertices[i] == Point(-vertices[i - 1].0)) {
        return Err(Invalid(format!(
            "GeoJSON LineString is not valid: Vertices {} and {i} are antipodal {}",
            i - 1,
            rendered(coordinates)
        )));
    }
    Ok(Polyline::new(vertices))
}

/// One ring's vertices, closed and with at least three distinct ones, without the closing
/// repeat (`isLoopClosed`, `eraseDuplicatePoints`). `shown` is what the size message prints.
fn ring(ring: &Bson, shown: &str) -> Result<Vec<Point>, Invalid> {
    let vertices: Vec<Point> = positions(Some(ring))?.into_iter().map(|(_, p)| p).collect();
    let (Some(first), Some(last)) = (vertices.first(), vertices.last()) else {
        return Err(Invalid(format!(
            "Loop has no vertices: {}",
            value_string(ring)
        )));
    };
    if first != last {
        return Err(Invalid(format!(
            "Loop is not closed, first vertex does not equal last vertex: {}",
            value_string(ring)
        )));
    }
    let mut vertices = without_repeats(vertices);
    vertices.pop();
    if vertices.len() < 3 {
        return Err(Invalid(format!(
            "Loop must have at least 3 different vertices, {} unique vertices were provided: {shown}",
            vertices.len()
        )));
    }
    Ok(vertices)
}

/// The reason a ring is not a valid S2 loop (mongod's bundled `S2Loop::IsValid`): a vertex met
/// twice, or two edges that cross.
fn loop_error(vertices: &[Point], ring: &Loop) -> Option<String> {
    let mut first_seen = HashMap::with_capacity(vertices.len());
    for (index, vertex) in vertices.iter().enumerate() {
        let bits = [
            vertex.0.x.to_bits(),
            vertex.0.y.to_bits(),
            vertex.0.z.to_bits(),
        ];
        if let Some(first) = first_seen.insert(bits, index) {
            return Some(format!("Duplicate vertices: {first} and {index}"));
        }
    }
    let mut crossing: Option<(usize, usize)> = None;
    let _ = visit_crossing_edge_pairs(
        ring.shape_index(),
        CrossingType::Interior,
        &mut |a, b, _| {
            let pair = (a.id.edge_id, b.id.edge_id);
            let (i, j) = (pair.0.min(pair.1) as usize, pair.0.max(pair.1) as usize);
            if crossing.is_none_or(|best| (i, j) < best) {
                crossing = Some((i, j));
            }
            ControlFlow::Continue(())
        },
    );
    let (i, j) = crossing?;
    let n = vertices.len();
    let degrees = |p: Point| {
        let at = LatLng::from_point(p);
        format!("[{:.7}, {:.7}]", at.lng.degrees(), at.lat.degrees())
    };
    Some(format!(
        "Edges {i} and {j} cross. Edge locations in degrees: {}-{} and {}-{}",
        degrees(vertices[i]),
        degrees(vertices[(i + 1) % n]),
        degrees(vertices[j]),
        degrees(vertices[(j + 1) % n])
    ))
}

/// A Polygon's `coordinates` (`parseGeoJSONPolygonCoordinates`): each ring normalized to the
/// smaller of the two regions it bounds, the first the shell and the others holes in it.
fn polygon(coordinates: Option<&Bson>) -> Result<Polygon, Invalid> {
    let rings = match coordinates {
        Some(Bson::Array(rings)) => rings,
        other => {
            return Err(Invalid(format!(
                "Polygon coordinates must be an array, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    let mut loops: Vec<Loop> = Vec::with_capacity(rings.len());
    for member in rings {
        let vertices = ring(member, &value_string(member))?;
        let mut shape = Loop::new(vertices.clone());
        if let Some(error) = loop_error(&vertices, &shape) {
            return Err(Invalid(format!(
                "Loop is not valid: {} {error}",
                value_string(member)
            )));
        }
        shape.normalize();
        if let Some(shell) = loops.first() {
            if !shell.contains_loop(&shape) {
                return Err(Invalid(format!(
                    "Secondary loops not contained by first exterior loop - secondary loops must be holes: {} first loop: {}",
                    value_string(member),
                    value_string(&rings[0])
                )));
            }
        }
        loops.push(shape);
    }
    if loops.is_empty() {
        return Err(Invalid("Polygon has no loops.".into()));
    }
    let shown = coordinates.map(value_string).unwrap_or_default();
    // Holes may neither nest nor cross (`S2Polygon::IsValid`, then GeoJSON's one level).
    for (i, hole) in loops.iter().enumerate().skip(1) {
        for (j, other) in loops.iter().enumerate().skip(i + 1) {
            if hole.contains_loop(other) || other.contains_loop(hole) {
                return Err(Invalid(format!(
                    "Polygon interior loops cannot be nested: {shown}"
                )));
            }
            if hole.intersects_loop(other) {
                return Err(Invalid(format!(
                    "Polygon isn't valid: Loop {i} crosses loop {j} {shown}"
                )));
            }
        }
    }
    let polygon = Polygon::from_loops(loops);
    if let Some(error) = polygon.find_validation_error() {
        return Err(Invalid(format!("Polygon isn't valid: {error} {shown}")));
    }
    Ok(polygon)
}

/// A Polygon with the strict winding crs (`parseBigSimplePolygonCoordinates`): one ring, its
/// interior on the left, never normalized.
fn big_polygon(coordinates: Option<&Bson>) -> Result<Polygon, Invalid> {
    let rings = match coordinates {
        Some(Bson::Array(rings)) => rings,
        other => {
            return Err(Invalid(format!(
                "Coordinates of polygon must be an array, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    let shown = coordinates.map(value_string).unwrap_or_default();
    if rings.len() != 1 {
        return Err(Invalid(format!(
            "Only one simple loop is allowed in a big polygon, instead provided {} loops: {shown}",
            rings.len()
        )));
    }
    let vertices = ring(&rings[0], &shown)?;
    let shape = Loop::new(vertices.clone());
    if let Some(error) = loop_error(&vertices, &shape) {
        return Err(Invalid(format!("Loop is not valid: {shown} {error}")));
    }
    Ok(Polygon::from_oriented_loops(vec![shape]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::bson;

    fn refusal(value: Bson) -> String {
        parse_stored(&value).unwrap_err().0
    }

    fn polygon_of(ring: Bson) -> Bson {
        bson!({"type": "Polygon", "coordinates": [ring]})
    }

    #[test]
    fn polygons_are_checked_as_mongod_checks_them() {
        assert_eq!(
            refusal(polygon_of(bson!([[0, 0], [1, 0], [1, 1]]))),
            "Loop is not closed, first vertex does not equal last vertex: [ [ 0, 0 ], [ 1, 0 ], [ 1, 1 ] ]"
        );
        assert_eq!(
            refusal(polygon_of(bson!([[0, 0], [1, 0], [1, 0], [0, 0]]))),
            "Loop must have at least 3 different vertices, 2 unique vertices were provided: [ [ 0, 0 ], [ 1, 0 ], [ 1, 0 ], [ 0, 0 ] ]"
        );
        assert_eq!(refusal(polygon_of(bson!([]))), "Loop has no vertices: []");
        assert_eq!(
            refusal(polygon_of(bson!([[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]))),
            "Loop is not valid: [ [ 0, 0 ], [ 1, 1 ], [ 1, 0 ], [ 0, 1 ], [ 0, 0 ] ] Edges 0 and 2 cross. Edge locations in degrees: [0.0000000, 0.0000000]-[1.0000000, 1.0000000] and [1.0000000, 0.0000000]-[0.0000000, 1.0000000]"
        );
        assert_eq!(
            refusal(polygon_of(bson!([[0, 0], [2, 0], [1, 1], [2, 2], [0, 2], [1, 1], [0, 0]]))),
            "Loop is not valid: [ [ 0, 0 ], [ 2, 0 ], [ 1, 1 ], [ 2, 2 ], [ 0, 2 ], [ 1, 1 ], [ 0, 0 ] ] Duplicate vertices: 2 and 5"
        );
        let shell = bson!([[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]);
        let outside = bson!([[20, 20], [21, 20], [21, 21], [20, 20]]);
        assert_eq!(
            refusal(bson!({"type": "Polygon", "coordinates": [shell.clone(), outside]})),
            "Secondary loops not contained by first exterior loop - secondary loops must be holes: [ [ 20, 20 ], [ 21, 20 ], [ 21, 21 ], [ 20, 20 ] ] first loop: [ [ 0, 0 ], [ 10, 0 ], [ 10, 10 ], [ 0, 10 ], [ 0, 0 ] ]"
        );
        let hole = bson!([[2, 2], [3, 2], [3, 3], [2, 2]]);
        assert!(parse_stored(&bson!({"type": "Polygon", "coordinates": [shell, hole]})).is_ok());
        // Winding does not matter without the strict crs: either way round is the small square.
        let clockwise = polygon_of(bson!([[0, 0], [0, 1], [1, 1], [1, 0], [0, 0]]));
        match parse_stored(&clockwise) {
            Ok(Geometry::Polygon(polygon)) => assert!(polygon.area() < 1.0),
            other => panic!("not a polygon: {other:?}"),
        }
    }

    #[test]
    fn other_types_are_checked_as_mongod_checks_them() {
        assert_eq!(
            refusal(bson!({"type": "LineString", "coordinates": [[1, 1], [1, 1]]})),
            "GeoJSON LineString must have at least 2 vertices, instead got 1 vertices: [ [ 1, 1 ], [ 1, 1 ] ]"
        );
        assert_eq!(
            refusal(bson!({"type": "LineString", "coordinates": [1, 1]})),
            "GeoJSON coordinates must be an array, instead got type int"
        );
        assert_eq!(
            refusal(bson!({"type": "MultiPoint", "coordinates": []})),
            "MultiPoint coordinates must have at least 1 element"
        );
        assert_eq!(
            refusal(bson!({"type": "MultiPolygon", "coordinates": 1})),
            "MultiPolygon coordinates must be an array, instead got type int"
        );
        assert_eq!(
            refusal(bson!({"type": "GeometryCollection", "geometries": [{"type": "GeometryCollection", "geometries": []}]})),
            "GeometryCollections cannot be nested: { type: \"GeometryCollection\", geometries: [] }"
        );
        assert_eq!(
            refusal(bson!({"type": "GeometryCollection", "geometries": [1]})),
            "Element 0 of \"geometries\" must be an object, instead got type int: 1"
        );
        assert_eq!(
            refusal(bson!({"type": "Feature"})),
            "unknown GeoJSON type: { type: \"Feature\" }"
        );
        assert_eq!(
            refusal(bson!("here")),
            "geo element must be an array or object: \"here\""
        );
        let strict = bson!({"type": "name", "properties": {"name": "urn:x-mongodb:crs:strictwinding:EPSG:4326"}});
        assert_eq!(
            refusal(bson!({"type": "LineString", "coordinates": [[0, 0], [1, 1]], "crs": strict})),
            "Strict winding order CRS is only supported by polygon"
        );
        // Stored legacy pairs may carry more values; a bad second value is refused.
        assert!(parse_stored(&bson!([1, 2, 3])).is_ok());
        assert!(parse_stored(&bson!({"lng": 1, "lat": 2, "name": "x"})).is_ok());
        assert_eq!(
            refusal(bson!([1, "a"])),
            "Point must only contain numeric elements, instead got type string"
        );
    }
}
