//! Distances as mongod measures them: on the sphere, the angle between two unit vectors
//! (`S1Angle`, an `atan2` of their cross and dot products) times [`EARTH_RADIUS_METERS`]; on
//! the plane, Euclid with mongod's exact cases for points on one axis (`shapes.cpp`,
//! `distance`).

use s2rst::s2::Point;

use crate::EARTH_RADIUS_METERS;

/// The angle between two points on the unit sphere, in radians; exactly 0 for the same point
/// (SERVER-52953).
pub fn sphere_radians(a: Point, b: Point) -> f64 {
    if a == b {
        0.0
    } else {
        a.distance(b).radians()
    }
}

/// The distance between two points on the sphere, in meters over the Earth's surface.
pub fn sphere_meters(a: Point, b: Point) -> f64 {
    sphere_radians(a, b) * EARTH_RADIUS_METERS
}

/// The distance between two points on the plane.
pub fn planar(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (dx, dy) = (a.0 - b.0, a.1 - b.1);
    if dx == 0.0 {
        dy.abs()
    } else if dy == 0.0 {
        dx.abs()
    } else {
        (dx * dx + dy * dy).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s2rst::s2::LatLng;

    fn at(lng: f64, lat: f64) -> Point {
        LatLng::from_degrees(lat, lng).normalized().to_point()
    }

    fn close(computed: f64, documented: f64) -> bool {
        ((computed - documented) / documented).abs() < 1e-9
    }

    /// The distances MongoDB's `$geoNear` page prints for its `places` collection.
    #[test]
    fn the_documented_places_distances() {
        let near = at(-73.99279, 40.719296);
        let sara_roosevelt_park = at(-73.9928, 40.7193);
        let central_park = at(-73.97, 40.77);
        let meters = sphere_meters(near, sara_roosevelt_park);
        assert!(close(meters, 0.9539931676365992), "{meters}");
        let radians = sphere_radians(near, sara_roosevelt_park);
        assert!(close(radians, 1.4957325341976439e-7), "{radians}");
        let radians = sphere_radians(near, central_park);
        assert!(close(radians, 0.0009348548688841822), "{radians}");
    }

    #[test]
    fn a_point_is_at_no_distance_from_itself() {
        let point = at(-73.9928, 40.7193);
        assert_eq!(sphere_meters(point, point), 0.0);
        // Half the equator is half the circumference at mongod's radius.
        let half = sphere_meters(at(0.0, 0.0), at(180.0, 0.0));
        assert!(
            close(half, std::f64::consts::PI * EARTH_RADIUS_METERS),
            "{half}"
        );
    }

    #[test]
    fn planar_distances() {
        assert_eq!(planar((0.0, 0.0), (3.0, 4.0)), 5.0);
        assert_eq!(planar((2.0, -1.0), (2.0, 6.0)), 7.0);
        assert_eq!(planar((-5.0, 1.5), (5.0, 1.5)), 10.0);
    }
}
