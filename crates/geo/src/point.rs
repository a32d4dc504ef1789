//! A position as mongod reads one: a legacy coordinate pair (`[x, y]`, or an object whose first
//! two values are the coordinates, whatever their names) on the plane until a spherical use
//! projects it, or a GeoJSON `Point` on the sphere; and the GeoJSON `crs` member. Rules and
//! messages are `GeoParser`'s (`parseFlatPoint`, `parseGeoJSONPoint`, `parseGeoJSONCRS`,
//! `parseQueryPoint`, `parseStoredPoint`) and `isValidLngLat` (shapes.cpp).

use bson::{Bson, Document};
use s2rst::s2::LatLng;
use tideway_base::bsonutil::as_f64;
use tideway_base::display::type_name;

use crate::format::six_digits;
use crate::Invalid;

/// The surface a geometry is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crs {
    /// The plane of legacy coordinate pairs (`2d` indexes, `$box`, `$center`, `$polygon`).
    Flat,
    /// The sphere of GeoJSON, longitude and latitude in degrees.
    Sphere,
    /// The sphere with a polygon's interior on the left of its ring (a "big polygon", crs
    /// `urn:x-mongodb:crs:strictwinding:EPSG:4326`).
    StrictSphere,
}

/// The CRS names GeoJSON may give, and what each means.
const SPHERE_NAMES: [&str; 2] = ["urn:ogc:def:crs:OGC:1.3:CRS84", "EPSG:4326"];
const STRICT_SPHERE_NAME: &str = "urn:x-mongodb:crs:strictwinding:EPSG:4326";

/// A parsed position: `x` is the longitude on the sphere.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Position {
    pub x: f64,
    pub y: f64,
    pub crs: Crs,
}

impl Position {
    /// The point on the unit sphere, for a position on the sphere or a legacy pair that is a
    /// valid longitude and latitude (`ShapeProjection`: others cannot be projected).
    pub fn on_sphere(&self) -> Option<s2rst::s2::Point> {
        is_valid_lng_lat(self.x, self.y)
            .then(|| LatLng::from_degrees(self.y, self.x).normalized().to_point())
    }
}

/// Whether extra values may follow the two coordinates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extra {
    /// Stored pairs and GeoJSON positions (an altitude, more fields) keep them unread.
    Allowed,
    /// Pairs given in a query have exactly two.
    Refused,
}

/// Whether `value` is a legacy coordinate pair rather than GeoJSON: an array, or an object
/// whose first value is a number (`GeoParser::isPoint` and friends).
pub fn is_legacy_pair(value: &Bson) -> bool {
    match value {
        Bson::Array(_) => true,
        Bson::Document(document) => document
            .iter()
            .next()
            .is_some_and(|(_, first)| as_f64(first).is_some()),
        _ => false,
    }
}

/// The point of a `$near`, `$nearSphere` or `$geoNear`: a legacy pair of exactly two numbers
/// (on the plane) or a GeoJSON `Point`.
pub fn query_point(value: &Bson) -> Result<Position, Invalid> {
    point(value, Extra::Refused)
}

/// A point stored in a document: a legacy pair (further values ignored) or a GeoJSON `Point`.
pub fn stored_point(value: &Bson) -> Result<Position, Invalid> {
    point(value, Extra::Allowed)
}

fn point(value: &Bson, extra: Extra) -> Result<Position, Invalid> {
    match value {
        Bson::Document(document) if !is_legacy_pair(value) => geojson_point(document),
        _ => {
            let (x, y) = flat_pair(Some(value), extra)?;
            Ok(Position {
                x,
                y,
                crs: Crs::Flat,
            })
        }
    }
}

/// A GeoJSON `Point` (`{type: "Point", coordinates: [lng, lat, …]}`, with an optional `crs`):
/// on the sphere, so its coordinates must be a longitude and a latitude.
pub fn geojson_point(document: &Document) -> Result<Position, Invalid> {
    // Without a `type` the object is still read as a point (`parseGeoJSONPoint`).
    if let Some(kind) = document.get("type") {
        let kind = match kind {
            Bson::String(kind) if GEOJSON_TYPES.contains(&kind.as_str()) => kind.as_str(),
            _ => "unknown",
        };
        if kind != "Point" {
            return Err(Invalid(format!(
                "Expected geojson geometry with type Point, but got type {kind}"
            )));
        }
    }
    if crs(document)? == Crs::StrictSphere {
        return Err(Invalid(
            "Strict winding order CRS is only supported by polygon".to_string(),
        ));
    }
    // `coordinates` goes straight to the pair parser: an object of two numbers is taken too.
    let (x, y) = flat_pair(document.get("coordinates"), Extra::Allowed)?;
    check_lng_lat(x, y)?;
    Ok(Position {
        x,
        y,
        crs: Crs::Sphere,
    })
}

/// The GeoJSON geometry types (`GeoParser::parseGeoJSONType`), matched case-sensitively.
pub const GEOJSON_TYPES: [&str; 7] = [
    "Point",
    "LineString",
    "Polygon",
    "MultiPoint",
    "MultiLineString",
    "MultiPolygon",
    "GeometryCollection",
];

/// The CRS a GeoJSON geometry names in its `crs` member (the sphere without one).
pub fn crs(geometry: &Document) -> Result<Crs, Invalid> {
    let Some(crs) = geometry.get("crs") else {
        return Ok(Crs::Sphere);
    };
    let Bson::Document(crs) = crs else {
        return Err(Invalid(format!(
            "GeoJSON CRS must be an object, instead got type {}",
            type_name(crs)
        )));
    };
    if !matches!(crs.get("type"), Some(Bson::String(kind)) if kind == "name") {
        return Err(Invalid(
            "GeoJSON CRS must have field \"type\": \"name\"".to_string(),
        ));
    }
    let properties = match crs.get("properties") {
        Some(Bson::Document(properties)) => properties,
        other => {
            return Err(Invalid(format!(
                "CRS must have field \"properties\" which is an object, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    let name = match properties.get("name") {
        Some(Bson::String(name)) => name,
        other => {
            return Err(Invalid(format!(
                "In CRS, \"properties.name\" must be a string, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    if SPHERE_NAMES.contains(&name.as_str()) {
        Ok(Crs::Sphere)
    } else if name == STRICT_SPHERE_NAME {
        Ok(Crs::StrictSphere)
    } else {
        Err(Invalid(format!("Unknown CRS name: {name}")))
    }
}

/// Two coordinates from an array or an object, in order (`parseFlatPoint`).
fn flat_pair(value: Option<&Bson>, extra: Extra) -> Result<(f64, f64), Invalid> {
    let (first, second, third) = match value {
        Some(Bson::Array(items)) => (items.first(), items.get(1), items.get(2)),
        Some(Bson::Document(document)) => {
            let mut values = document.iter().map(|(_, value)| value);
            (values.next(), values.next(), values.next())
        }
        other => {
            return Err(Invalid(format!(
                "Point must be an array or object, instead got type {}",
                type_name_of(other)
            )))
        }
    };
    let coordinate = |value: Option<&Bson>| {
        value.and_then(as_f64).ok_or_else(|| {
            Invalid(format!(
                "Point must only contain numeric elements, instead got type {}",
                type_name_of(value)
            ))
        })
    };
    let (x, y) = (coordinate(first)?, coordinate(second)?);
    if extra == Extra::Refused && third.is_some() {
        return Err(Invalid(
            "Point must only contain two numeric elements".to_string(),
        ));
    }
    if !x.is_finite() || !y.is_finite() {
        return Err(Invalid(
            "Point coordinates must be finite numbers".to_string(),
        ));
    }
    Ok((x, y))
}

/// Whether `lng` and `lat` are a longitude and a latitude (bounds included).
pub fn is_valid_lng_lat(lng: f64, lat: f64) -> bool {
    lng.abs() <= 180.0 && lat.abs() <= 90.0
}

/// The S2 point of a longitude and a latitude (`coordToPoint`).
pub(crate) fn sphere_point(lng: f64, lat: f64) -> Result<s2rst::s2::Point, Invalid> {
    check_lng_lat(lng, lat)?;
    Ok(LatLng::from_degrees(lat, lng).normalized().to_point())
}

fn check_lng_lat(lng: f64, lat: f64) -> Result<(), Invalid> {
    if is_valid_lng_lat(lng, lat) {
        Ok(())
    } else {
        Err(Invalid(format!(
            "Longitude/latitude is out of bounds, lng: {} lat: {}",
            six_digits(lng),
            six_digits(lat)
        )))
    }
}

/// The values of an array, or of an object in field order: legacy shapes (`$box`, `$polygon`,
/// `$center`, `[x, y, maxDistance]`) may be written either way. `None` for other values.
pub fn listed_values(value: &Bson) -> Option<Vec<&Bson>> {
    match value {
        Bson::Array(items) => Some(items.iter().collect()),
        Bson::Document(document) => Some(document.iter().map(|(_, value)| value).collect()),
        _ => None,
    }
}

/// mongod's type name, `missing` for an absent value.
pub(crate) fn type_name_of(value: Option<&Bson>) -> &'static str {
    value.map_or("missing", type_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn refusal(result: Result<Position, Invalid>) -> String {
        result.expect_err("refused").0
    }

    #[test]
    fn legacy_pairs_are_arrays_or_objects_of_numbers_on_the_plane() {
        let flat = |x, y| Position {
            x,
            y,
            crs: Crs::Flat,
        };
        assert_eq!(query_point(&bson!([1, 2.5])), Ok(flat(1.0, 2.5)));
        // Names do not matter: the first two values are x and y.
        assert_eq!(
            query_point(&bson!({"lat": 40, "lng": -73})),
            Ok(flat(40.0, -73.0))
        );
        // Beyond longitude and latitude: a plane has no bounds.
        assert_eq!(stored_point(&bson!([500, -300])), Ok(flat(500.0, -300.0)));
        assert_eq!(stored_point(&bson!([1, 2, 3])), Ok(flat(1.0, 2.0)));
        assert_eq!(
            refusal(query_point(&bson!([1, 2, 3]))),
            "Point must only contain two numeric elements"
        );
        assert_eq!(
            refusal(query_point(&bson!([1, "a"]))),
            "Point must only contain numeric elements, instead got type string"
        );
        assert_eq!(
            refusal(query_point(&bson!([]))),
            "Point must only contain numeric elements, instead got type missing"
        );
        assert_eq!(
            refusal(query_point(&bson!([1]))),
            "Point must only contain numeric elements, instead got type missing"
        );
        assert_eq!(
            refusal(query_point(&bson!("here"))),
            "Point must be an array or object, instead got type string"
        );
        assert_eq!(
            refusal(stored_point(&bson!([f64::NAN, 1]))),
            "Point coordinates must be finite numbers"
        );
        assert_eq!(
            refusal(stored_point(&bson!([1, f64::INFINITY]))),
            "Point coordinates must be finite numbers"
        );
    }

    #[test]
    fn geojson_points_are_longitude_and_latitude_on_the_sphere() {
        let point = stored_point(&bson!({"type": "Point", "coordinates": [-73.97, 40.77]}));
        assert_eq!(
            point,
            Ok(Position {
                x: -73.97,
                y: 40.77,
                crs: Crs::Sphere
            })
        );
        // Bounds are inclusive; an altitude is kept out of the way.
        assert!(stored_point(&bson!({"type": "Point", "coordinates": [180, -90, 12]})).is_ok());
        // The message mongod gave (an issue report, 2025).
        assert_eq!(
            refusal(stored_point(
                &bson!({"type": "Point", "coordinates": [190, 0]})
            )),
            "Longitude/latitude is out of bounds, lng: 190 lat: 0"
        );
        assert_eq!(
            refusal(stored_point(
                &bson!({"type": "Point", "coordinates": [36.50432, 110.2712]})
            )),
            "Longitude/latitude is out of bounds, lng: 36.5043 lat: 110.271"
        );
        assert_eq!(
            refusal(query_point(&bson!({"type": "Polygon", "coordinates": []}))),
            "Expected geojson geometry with type Point, but got type Polygon"
        );
        assert_eq!(
            refusal(query_point(
                &bson!({"type": "point", "coordinates": [1, 2]})
            )),
            "Expected geojson geometry with type Point, but got type unknown"
        );
        // Without a `type`, `parseGeoJSONPoint` reads the coordinates all the same.
        assert_eq!(
            query_point(&bson!({"coordinates": [1, 2]})).map(|p| (p.x, p.y, p.crs)),
            Ok((1.0, 2.0, Crs::Sphere))
        );
        assert_eq!(
            refusal(query_point(&bson!({"type": "Point"}))),
            "Point must be an array or object, instead got type missing"
        );
    }

    #[test]
    fn crs_names_the_sphere_or_the_strict_winding_one() {
        let with_crs = |name: &str| doc! {"crs": {"type": "name", "properties": {"name": name}}};
        assert_eq!(crs(&doc! {}), Ok(Crs::Sphere));
        assert_eq!(crs(&with_crs("EPSG:4326")), Ok(Crs::Sphere));
        assert_eq!(
            crs(&with_crs("urn:ogc:def:crs:OGC:1.3:CRS84")),
            Ok(Crs::Sphere)
        );
        assert_eq!(crs(&with_crs(STRICT_SPHERE_NAME)), Ok(Crs::StrictSphere));
        assert_eq!(
            crs(&with_crs("EPSG:3857")),
            Err(Invalid("Unknown CRS name: EPSG:3857".to_string()))
        );
        let refused = |crs_value: Bson| crs(&doc! {"crs": crs_value}).unwrap_err().0;
        assert_eq!(
            refused(bson!("EPSG:4326")),
            "GeoJSON CRS must be an object, instead got type string"
        );
        assert_eq!(
            refused(bson!({"type": "link"})),
            "GeoJSON CRS must have field \"type\": \"name\""
        );
        assert_eq!(
            refused(bson!({"type": "name"})),
            "CRS must have field \"properties\" which is an object, instead got type missing"
        );
        assert_eq!(
            refused(bson!({"type": "name", "properties": {"name": 4326}})),
            "In CRS, \"properties.name\" must be a string, instead got type int"
        );
        let mut strict_point = with_crs(STRICT_SPHERE_NAME);
        strict_point.insert("type", "Point");
        strict_point.insert("coordinates", bson!([1, 2]));
        assert_eq!(
            refusal(stored_point(&Bson::Document(strict_point))),
            "Strict winding order CRS is only supported by polygon"
        );
    }

    #[test]
    fn only_longitudes_and_latitudes_reach_the_sphere() {
        let flat = |x, y| Position {
            x,
            y,
            crs: Crs::Flat,
        };
        assert!(flat(-73.97, 40.77).on_sphere().is_some());
        assert!(flat(180.0, 90.0).on_sphere().is_some());
        assert!(flat(180.5, 0.0).on_sphere().is_none());
        assert!(flat(0.0, -90.5).on_sphere().is_none());
    }
}
