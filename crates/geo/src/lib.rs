//! tideway-geo: geospatial values as mongod reads them (issue 28). Modules: `point` (a position
//! in every form mongod accepts, checked by its rules with its messages, and the GeoJSON `crs`
//! member), `shape` (every GeoJSON geometry, checked as mongod checks it), `relate` (the regions
//! of `$geoWithin`/`$geoIntersects` and how a stored geometry relates to them), `distance` (on the
//! sphere as mongod measures it, and on the plane), `format` (numbers as mongod prints them in
//! these messages).
//!
//! Invariants: rules and messages follow mongod 7.0/8.0 (`src/mongo/db/geo/geoparser.cpp`,
//! `shapes.cpp`); parsing client values never panics and recurses at most one level (a
//! `GeometryCollection`); spherical geometry comes from `s2rst` (a port of the S2 library mongod
//! uses), never from hand-written formulas.

pub mod distance;
pub mod format;
pub mod point;
pub mod relate;
pub mod shape;

/// The Earth's radius mongod turns angles into meters with (`kRadiusOfEarthInMeters`,
/// `src/mongo/db/geo/geoconstants.h`; not the 6,371 km mean radius).
pub const EARTH_RADIUS_METERS: f64 = 6_378_100.0;

/// Why a geospatial value is refused: mongod's reason, which a query answers as 2 BadValue and
/// an insert into a `2dsphere` index wraps in 16755.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}
