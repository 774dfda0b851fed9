//! The GEO commands. A geo set is a sorted set (Redis's layout, so the sorted set commands work
//! on it, and TYPE says `zset`) whose scores are 52-bit geohashes: longitude and latitude, each
//! cut into 2^26 steps over Redis's ranges, bits interleaved. A search by radius or box reads
//! the score ranges of the 9 geohash boxes (the centre and its 8 neighbours) that cover the
//! shape, as Redis does, and keeps the members really inside it. The arithmetic is Redis 7.0's
//! (src/geohash.c, geohash_helper.c, geo.c) operation for operation, so positions, hashes and
//! distances print the same digits.

use std::cmp::Ordering;

use cxltier_store::{ScoreBound, StoreError, ZAddFlags};

use crate::args::{reply_each_member, typed};
use crate::context::{fail, Ctx, Effect};
use crate::errors::{NOT_INT, SYNTAX};
use crate::numbers::int_arg;
use crate::resp::reply;

/// Redis's limits: latitudes beyond these cannot be projected (EPSG:900913).
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LON_MIN: f64 = -180.0;
const LON_MAX: f64 = 180.0;
/// Steps (bits per coordinate) of a stored hash: 26 × 2 = 52 bits, exact in a double score.
const STEP_MAX: u8 = 26;
/// The Earth's quadratic mean radius for WGS-84, Redis's figure.
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
/// Redis's degrees-to-radians factor (`M_PI / 180.0`).
const D_R: f64 = std::f64::consts::PI / 180.0;
/// Members read per store call while walking a box's score range.
const PAGE: u64 = 1024;

const NOT_FLOAT: &str = "ERR value is not a valid float";
const BAD_UNIT: &str = "ERR unsupported unit provided. please use M, KM, FT, MI";
const NO_MEMBER: &str = "ERR could not decode requested zset member";

/// A geohash of `step` bits per coordinate. Zero bits with zero step is "no box" (a neighbour
/// dropped from a search), as Redis's `HASHISZERO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HashBits {
    pub bits: u64,
    pub step: u8,
}

impl HashBits {
    const NONE: HashBits = HashBits { bits: 0, step: 0 };

    fn is_none(self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

/// A box: longitude and latitude ranges (min, max).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Area {
    pub lon: (f64, f64),
    pub lat: (f64, f64),
}

/// Spread the 32 bits of `x` to the even bits and those of `y` to the odd bits.
fn interleave64(x: u32, y: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (x as u64, y as u64);
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

/// The inverse of [`interleave64`]: even bits in the low word, odd bits in the high word.
fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let mut x = interleaved;
    let mut y = interleaved >> 1;
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// Geohash of a point over the given ranges (`None` outside Redis's limits or the ranges).
fn encode(
    lon_range: (f64, f64),
    lat_range: (f64, f64),
    lon: f64,
    lat: f64,
    step: u8,
) -> Option<HashBits> {
    if step == 0 || step > 32 {
        return None;
    }
    // The NaN-safe negation of Redis's range checks.
    let inside = |v: f64, lo: f64, hi: f64| v >= lo && v <= hi;
    if !inside(lon, LON_MIN, LON_MAX) || !inside(lat, LAT_MIN, LAT_MAX) {
        return None;
    }
    if !inside(lat, lat_range.0, lat_range.1) || !inside(lon, lon_range.0, lon_range.1) {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (lat - lat_range.0) / (lat_range.1 - lat_range.0) * scale;
    let lon_offset = (lon - lon_range.0) / (lon_range.1 - lon_range.0) * scale;
    // C converts the offsets to uint32_t: truncation toward zero.
    Some(HashBits {
        bits: interleave64(lat_offset as u32, lon_offset as u32),
        step,
    })
}

/// Geohash of a point over Redis's ranges (what GEOADD stores, at step 26).
pub(crate) fn encode_wgs84(lon: f64, lat: f64, step: u8) -> Option<HashBits> {
    encode((LON_MIN, LON_MAX), (LAT_MIN, LAT_MAX), lon, lat, step)
}

/// The box a geohash stands for, over Redis's ranges.
pub(crate) fn decode(hash: HashBits) -> Option<Area> {
    if hash.is_none() {
        return None;
    }
    let sep = deinterleave64(hash.bits);
    let lat_scale = LAT_MAX - LAT_MIN;
    let lon_scale = LON_MAX - LON_MIN;
    let ilat = sep as u32;
    let ilon = (sep >> 32) as u32;
    let div = (1u64 << hash.step) as f64;
    Some(Area {
        lat: (
            LAT_MIN + (ilat as f64 / div) * lat_scale,
            LAT_MIN + ((ilat as f64 + 1.0) / div) * lat_scale,
        ),
        lon: (
            LON_MIN + (ilon as f64 / div) * lon_scale,
            LON_MIN + ((ilon as f64 + 1.0) / div) * lon_scale,
        ),
    })
}

/// The point a stored score stands for: the centre of its step-26 box, clamped to the limits.
pub(crate) fn decode_score(score: f64) -> Option<(f64, f64)> {
    let area = decode(HashBits {
        bits: score as u64,
        step: STEP_MAX,
    })?;
    let lon = ((area.lon.0 + area.lon.1) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((area.lat.0 + area.lat.1) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((lon, lat))
}

/// A hash as the 52-bit score of a sorted set.
fn align52(hash: HashBits) -> u64 {
    hash.bits << (52 - hash.step as u32 * 2)
}

/// The bits of an interleaved hash that carry the longitude (x); the others carry the latitude.
const X_BITS: u64 = 0xaaaaaaaaaaaaaaaa;
const Y_BITS: u64 = 0x5555555555555555;

/// The box moved by one along the axis whose bits are `axis` ([`X_BITS`] or [`Y_BITS`]), east
/// or north when `d` is positive, west or south when negative: that axis's bits count as one
/// number, the other axis's bits filled in so that the carry (or borrow) runs across them.
fn move_along(hash: &mut HashBits, d: i8, axis: u64) {
    if d == 0 {
        return;
    }
    let shift = 64 - hash.step as u32 * 2;
    let other = !axis;
    let mut moved = hash.bits & axis;
    let kept = hash.bits & other;
    let zz = other >> shift;
    if d > 0 {
        moved = moved.wrapping_add(zz + 1);
    } else {
        moved |= zz;
        moved = moved.wrapping_sub(zz + 1);
    }
    moved &= axis >> shift;
    hash.bits = moved | kept;
}

/// The box moved `dx` east/west and `dy` north/south.
fn neighbour(hash: HashBits, dx: i8, dy: i8) -> HashBits {
    let mut h = hash;
    move_along(&mut h, dx, X_BITS);
    move_along(&mut h, dy, Y_BITS);
    h
}

/// The 11-character base32 geohash clients know (over -90..90 latitudes, unlike the stored
/// score), as GEOHASH prints it; the 11th character stands for bits the score does not have.
pub(crate) fn standard_geohash(score: f64) -> Option<String> {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = decode_score(score)?;
    let hash = encode((-180.0, 180.0), (-90.0, 90.0), lon, lat, STEP_MAX)?;
    let mut s = String::with_capacity(11);
    for i in 0..11 {
        let idx = if i == 10 {
            0
        } else {
            ((hash.bits >> (52 - (i + 1) * 5)) & 0x1f) as usize
        };
        s.push(ALPHABET[idx] as char);
    }
    Some(s)
}

fn deg_rad(a: f64) -> f64 {
    a * D_R
}
fn rad_deg(a: f64) -> f64 {
    a / D_R
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Haversine distance in metres, Redis's formula (with its shortcut along a meridian).
pub(crate) fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// The step whose boxes are about the size of a search of `range_meters` at `lat`.
fn steps_by_radius(range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut range = range_meters;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// What a search covers: a circle or an axis-aligned box (width, height) around a centre, in
/// the unit given (`to_meters` converts).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    Radius(f64),
    Box(f64, f64),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Search {
    pub lon: f64,
    pub lat: f64,
    pub shape: Shape,
    pub to_meters: f64,
}

impl Search {
    /// The bounding box: min lon, min lat, max lon, max lat (Redis's `geohashBoundingBox`).
    fn bounds(&self) -> [f64; 4] {
        let (height, width) = match self.shape {
            Shape::Radius(r) => (self.to_meters * r, self.to_meters * r),
            Shape::Box(w, h) => (self.to_meters * (h / 2.0), self.to_meters * (w / 2.0)),
        };
        let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
        let lon_delta_top =
            rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(self.lat + lat_delta).cos());
        let lon_delta_bottom =
            rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(self.lat - lat_delta).cos());
        let south = self.lat < 0.0;
        let lon_delta = if south {
            lon_delta_bottom
        } else {
            lon_delta_top
        };
        [
            self.lon - lon_delta,
            self.lat - lat_delta,
            self.lon + lon_delta,
            self.lat + lat_delta,
        ]
    }

    /// The boxes to read, in Redis's order: centre, N, S, E, W, NE, NW, SE, SW (dropped ones
    /// as [`HashBits::NONE`]).
    pub(crate) fn boxes(&self) -> [HashBits; 9] {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounds();
        let radius_meters = match self.shape {
            Shape::Radius(r) => r,
            Shape::Box(w, h) => ((w / 2.0) * (w / 2.0) + (h / 2.0) * (h / 2.0)).sqrt(),
        } * self.to_meters;
        let mut steps = steps_by_radius(radius_meters, self.lat);
        let at = |steps: u8| {
            let hash = encode_wgs84(self.lon, self.lat, steps).unwrap_or(HashBits::NONE);
            (hash, decode(hash).unwrap_or_default())
        };
        let (mut hash, mut area) = at(steps);
        // Near a box's edge the estimated step may be too fine for the 9 boxes to cover the
        // shape: one step coarser then.
        let side = |dx, dy| decode(neighbour(hash, dx, dy)).unwrap_or_default();
        let decrease = side(0, 1).lat.1 < max_lat
            || side(0, -1).lat.0 > min_lat
            || side(1, 0).lon.1 < max_lon
            || side(-1, 0).lon.0 > min_lon;
        if steps > 1 && decrease {
            steps -= 1;
            (hash, area) = at(steps);
        }
        // Redis's order after the centre: N, S, E, W, NE, NW, SE, SW, as (east, north) steps.
        const AROUND: [(i8, i8); 8] = [
            (0, 1),
            (0, -1),
            (1, 0),
            (-1, 0),
            (1, 1),
            (-1, 1),
            (1, -1),
            (-1, -1),
        ];
        let mut n = [hash; 9];
        for (b, &(dx, dy)) in n[1..].iter_mut().zip(&AROUND) {
            *b = neighbour(hash, dx, dy);
            // Boxes wholly outside the bounding box are not read.
            let outside = (dy < 0 && area.lat.0 < min_lat)
                || (dy > 0 && area.lat.1 > max_lat)
                || (dx < 0 && area.lon.0 < min_lon)
                || (dx > 0 && area.lon.1 > max_lon);
            if steps >= 2 && outside {
                *b = HashBits::NONE;
            }
        }
        n
    }

    /// The distance (metres) of a point from the centre if it is inside the shape.
    pub(crate) fn contains(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.shape {
            Shape::Radius(r) => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= r * self.to_meters).then_some(d)
            }
            Shape::Box(w, h) => {
                let (width_m, height_m) = (w * self.to_meters, h * self.to_meters);
                if lat_distance(lat, self.lat) > height_m / 2.0 {
                    return None;
                }
                if distance(lon, lat, self.lon, lat) > width_m / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }
}

/// One member found by a search.
struct Found {
    member: Vec<u8>,
    score: f64,
    lon: f64,
    lat: f64,
    /// Metres until the reply, then in the search's unit.
    dist: f64,
}

/// The members of `key` inside the search's shape, box by box in Redis's order (ascending
/// score within a box), stopping once `limit` were found (ANY).
fn members_within(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    search: &Search,
    limit: Option<u64>,
) -> Result<Vec<Found>, StoreError> {
    let boxes = search.boxes();
    let mut found = Vec::new();
    let full = |found: &Vec<Found>| limit.is_some_and(|l| found.len() as u64 >= l);
    let mut last_processed = 0;
    for (i, b) in boxes.iter().enumerate() {
        if b.is_none() {
            continue;
        }
        // With huge radii neighbours can be the same box: read it once.
        if last_processed != 0 && *b == boxes[last_processed] {
            continue;
        }
        if full(&found) {
            break;
        }
        let min = align52(*b) as f64;
        let max = align52(HashBits {
            bits: b.bits + 1,
            step: b.step,
        }) as f64;
        let mut offset = 0;
        'pages: loop {
            let page = ctx.store.zrange_by_score(
                key,
                ScoreBound::Inclusive(min),
                ScoreBound::Exclusive(max),
                false,
                offset,
                Some(PAGE),
            )?;
            offset += page.len() as u64;
            let last_page = (page.len() as u64) < PAGE;
            for (member, score) in page {
                if let Some((lon, lat)) = decode_score(score) {
                    if let Some(dist) = search.contains(lon, lat) {
                        found.push(Found {
                            member,
                            score,
                            lon,
                            lat,
                            dist,
                        });
                    }
                }
                if full(&found) {
                    break 'pages;
                }
            }
            if last_page {
                break;
            }
        }
        last_processed = i;
    }
    Ok(found)
}

/// Redis's `pqsort` (src/pqsort.c, a BSD quicksort): sorts `v` enough that positions
/// `lo..=hi` hold what a full sort would put there, skipping the parts outside them. The parts
/// left to sort are kept on a stack rather than recursed into (they are disjoint, so the order
/// of working on them changes nothing).
fn pqsort<T>(v: &mut [T], cmp: impl Fn(&T, &T) -> Ordering, lo: usize, hi: usize) {
    let med3 = |v: &[T], a: usize, b: usize, c: usize| {
        if cmp(&v[a], &v[b]) == Ordering::Less {
            if cmp(&v[b], &v[c]) == Ordering::Less {
                b
            } else if cmp(&v[a], &v[c]) == Ordering::Less {
                c
            } else {
                a
            }
        } else if cmp(&v[b], &v[c]) == Ordering::Greater {
            b
        } else if cmp(&v[a], &v[c]) == Ordering::Less {
            a
        } else {
            c
        }
    };
    let vecswap = |v: &mut [T], a: usize, b: usize, n: usize| {
        for i in 0..n {
            v.swap(a + i, b + i);
        }
    };
    // Whether a part `[start, start + len)` holds none of `lo..=hi`.
    let outside = |start: usize, len: usize| {
        let end = start + len - 1;
        (lo < start && hi < start) || (lo > end && hi > end)
    };
    let mut parts = vec![(0, v.len())];
    while let Some((mut a, mut n)) = parts.pop() {
        loop {
            if n < 7 {
                for pm in a + 1..a + n {
                    let mut pl = pm;
                    while pl > a && cmp(&v[pl - 1], &v[pl]) == Ordering::Greater {
                        v.swap(pl, pl - 1);
                        pl -= 1;
                    }
                }
                break;
            }
            let mut pm = a + n / 2;
            if n > 7 {
                let mut pl = a;
                let mut pn = a + n - 1;
                if n > 40 {
                    let d = n / 8;
                    pl = med3(v, pl, pl + d, pl + 2 * d);
                    pm = med3(v, pm - d, pm, pm + d);
                    pn = med3(v, pn - 2 * d, pn - d, pn);
                }
                pm = med3(v, pl, pm, pn);
            }
            v.swap(a, pm);
            let (mut pa, mut pb) = (a + 1, a + 1);
            let (mut pc, mut pd) = (a + n - 1, a + n - 1);
            loop {
                while pb <= pc {
                    match cmp(&v[pb], &v[a]) {
                        Ordering::Greater => break,
                        Ordering::Equal => {
                            v.swap(pa, pb);
                            pa += 1;
                        }
                        Ordering::Less => {}
                    }
                    pb += 1;
                }
                while pb <= pc {
                    match cmp(&v[pc], &v[a]) {
                        Ordering::Less => break,
                        Ordering::Equal => {
                            v.swap(pc, pd);
                            pd -= 1;
                        }
                        Ordering::Greater => {}
                    }
                    pc -= 1;
                }
                if pb > pc {
                    break;
                }
                v.swap(pb, pc);
                pb += 1;
                pc -= 1;
            }
            let pn = a + n;
            let r = (pa - a).min(pb - pa);
            vecswap(v, a, pb - r, r);
            let r = (pd - pc).min(pn - pd - 1);
            vecswap(v, pb, pn - r, r);
            let left = pb - pa;
            if left > 1 && !outside(a, left) {
                parts.push((a, left));
            }
            let right = pd - pc;
            if right > 1 && !outside(pn - right, right) {
                a = pn - right;
                n = right;
                continue;
            }
            break;
        }
    }
}

/// A float as Redis's `getDoubleFromObject` reads one: all of the text, no leading space, no
/// NaN, and no overflow or underflow to zero of a finite number.
fn float_arg(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    if v.is_nan() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    if v.is_infinite() && !lower.contains("inf") {
        return None;
    }
    let mantissa = lower.split('e').next().unwrap_or("");
    if v == 0.0 && mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c)) {
        return None;
    }
    Some(v)
}

/// A longitude, latitude pair within Redis's limits, or the error to reply.
fn lon_lat_arg(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), String> {
    let (Some(x), Some(y)) = (float_arg(lon), float_arg(lat)) else {
        return Err(NOT_FLOAT.into());
    };
    if !(LON_MIN..=LON_MAX).contains(&x) || !(LAT_MIN..=LAT_MAX).contains(&y) {
        return Err(format!("ERR invalid longitude,latitude pair {x:.6},{y:.6}"));
    }
    Ok((x, y))
}

/// Metres per unit.
fn unit_arg(b: &[u8]) -> Option<f64> {
    match b.to_ascii_lowercase().as_slice() {
        b"m" => Some(1.0),
        b"km" => Some(1000.0),
        b"ft" => Some(0.3048),
        b"mi" => Some(1609.34),
        _ => None,
    }
}

/// `radius unit`: the radius and metres per unit, or the error to reply.
fn radius_arg(radius: &[u8], unit: &[u8]) -> Result<(f64, f64), String> {
    let r = float_arg(radius).ok_or("ERR need numeric radius")?;
    if r < 0.0 {
        return Err("ERR radius cannot be negative".into());
    }
    Ok((r, unit_arg(unit).ok_or(BAD_UNIT)?))
}

/// `width height unit`.
fn box_arg(width: &[u8], height: &[u8], unit: &[u8]) -> Result<(f64, f64, f64), String> {
    let w = float_arg(width).ok_or("ERR need numeric width")?;
    let h = float_arg(height).ok_or("ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err("ERR height or width cannot be negative".into());
    }
    Ok((w, h, unit_arg(unit).ok_or(BAD_UNIT)?))
}

/// A distance as Redis prints one: rounded (half to even, `llrint`) to 4 decimals.
pub(crate) fn fixed4(d: f64) -> String {
    let v = (d * 10000.0).round_ties_even();
    if v == 0.0 {
        return "0.0000".into();
    }
    let neg = v < 0.0;
    let a = v.abs() as u64;
    format!(
        "{}{}.{:04}",
        if neg { "-" } else { "" },
        a / 10000,
        a % 10000
    )
}

/// A coordinate as Redis's `addReplyHumanLongDouble`: `%.17Lf` with trailing zeros dropped.
pub(crate) fn human(d: f64) -> String {
    let s = format!("{d:.17}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

fn reply_human(ctx: &mut Ctx<'_>, d: f64) {
    let text = human(d);
    if ctx.session.proto >= 3 {
        ctx.out.push(b',');
        ctx.out.extend_from_slice(text.as_bytes());
        ctx.out.extend_from_slice(b"\r\n");
    } else {
        reply::bulk(ctx.out, text.as_bytes());
    }
}

/// `GEOADD key [NX|XX] [CH] longitude latitude member [...]`: ZADD of the members' hashes.
pub(crate) fn geoadd(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut flags = ZAddFlags::default();
    let mut ch = false;
    let mut i = 2;
    while i < args.len() {
        match args[i].to_ascii_uppercase().as_slice() {
            b"NX" => flags.nx = true,
            b"XX" => flags.xx = true,
            b"CH" => ch = true,
            _ => break,
        }
        i += 1;
    }
    let rest = &args[i..];
    if rest.len() % 3 != 0 || (flags.nx && flags.xx) {
        return fail(ctx, SYNTAX);
    }
    if rest.is_empty() {
        // ZADD with no pairs, which GEOADD becomes, is a syntax error.
        return fail(ctx, SYNTAX);
    }
    let mut pairs: Vec<(f64, &[u8])> = Vec::with_capacity(rest.len() / 3);
    for t in rest.chunks(3) {
        let (lon, lat) = match lon_lat_arg(t[0], t[1]) {
            Ok(p) => p,
            Err(e) => return fail(ctx, &e),
        };
        let Some(hash) = encode_wgs84(lon, lat, STEP_MAX) else {
            return fail(
                ctx,
                &format!("ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"),
            );
        };
        pairs.push((align52(hash) as f64, t[2]));
    }
    typed(ctx, |ctx| {
        let o = ctx.store.zadd(args[1], flags, &pairs)?;
        Ok(crate::args::reply_added(ctx, &o, ch))
    })
}

/// `GEOPOS key member [...]`: each member's position, or a null array.
pub(crate) fn geopos(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply_each_member(
        ctx,
        args,
        |store, key, m| Ok(store.zscore(key, m)?.and_then(decode_score)),
        |ctx, position| match position {
            Some((lon, lat)) => {
                reply::array(ctx.out, 2);
                reply_human(ctx, lon);
                reply_human(ctx, lat);
            }
            None => reply::null_array(ctx.out, ctx.session.proto),
        },
    )
}

/// `GEOHASH key member [...]`: each member's standard 11-character geohash, or null.
pub(crate) fn geohash(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply_each_member(
        ctx,
        args,
        |store, key, m| Ok(store.zscore(key, m)?.and_then(standard_geohash)),
        |ctx, hash| match hash {
            Some(h) => reply::bulk(ctx.out, h.as_bytes()),
            None => reply::null(ctx.out, ctx.session.proto),
        },
    )
}

/// `GEODIST key member1 member2 [M|KM|FT|MI]`.
pub(crate) fn geodist(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let to_meters = match args.len() {
        4 => 1.0,
        5 => match unit_arg(args[4]) {
            Some(u) => u,
            None => return fail(ctx, BAD_UNIT),
        },
        _ => return fail(ctx, SYNTAX),
    };
    typed(ctx, |ctx| {
        let a = ctx.store.zscore(args[1], args[2])?.and_then(decode_score);
        let b = ctx.store.zscore(args[1], args[3])?.and_then(decode_score);
        match (a, b) {
            (Some(a), Some(b)) => {
                let d = distance(a.0, a.1, b.0, b.1) / to_meters;
                reply::bulk(ctx.out, fixed4(d).as_bytes());
            }
            _ => reply::null(ctx.out, ctx.session.proto),
        }
        Ok(Effect::Read)
    })
}

/// Which of the search commands runs (Redis's `georadiusGeneric` flags).
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// GEORADIUS[_RO]: around a longitude, latitude.
    Coords { store_ok: bool },
    /// GEORADIUSBYMEMBER[_RO]: around a member.
    Member { store_ok: bool },
    /// GEOSEARCH.
    Search,
    /// GEOSEARCHSTORE.
    SearchStore,
}

#[derive(Clone, Copy, PartialEq)]
enum Order {
    None,
    Asc,
    Desc,
}

fn search_generic(ctx: &mut Ctx<'_>, args: &[&[u8]], v: Variant) -> Result<Effect, StoreError> {
    let src = if v == Variant::SearchStore {
        args[2]
    } else {
        args[1]
    };
    typed(ctx, |ctx| {
        // The source's type is checked before anything else, as Redis does.
        let exists = ctx.store.zcard(src)? > 0;
        match search_parsed(ctx, args, v, src, exists)? {
            Ok(effect) => Ok(effect),
            Err(msg) => fail(ctx, &msg),
        }
    })
}

/// The search once the source is known to be a sorted set (or absent); `Ok(Err(msg))` is an
/// error reply for the arguments.
fn search_parsed(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    v: Variant,
    src: &[u8],
    exists: bool,
) -> Result<Result<Effect, String>, StoreError> {
    let mut centre: Option<(f64, f64)> = None;
    let mut shape: Option<(Shape, f64)> = None;
    let mut store: Option<&[u8]> = None;
    let mut storedist = false;
    let base = match v {
        Variant::Coords { .. } => {
            let p = match lon_lat_arg(args[2], args[3]) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            centre = Some(p);
            match radius_arg(args[4], args[5]) {
                Ok((r, u)) => shape = Some((Shape::Radius(r), u)),
                Err(e) => return Ok(Err(e)),
            }
            6
        }
        Variant::Member { .. } if !exists => 5,
        Variant::Member { .. } => {
            match ctx.store.zscore(src, args[2])?.and_then(decode_score) {
                Some(p) => centre = Some(p),
                None => return Ok(Err(NO_MEMBER.into())),
            }
            match radius_arg(args[3], args[4]) {
                Ok((r, u)) => shape = Some((Shape::Radius(r), u)),
                Err(e) => return Ok(Err(e)),
            }
            5
        }
        Variant::Search => 2,
        Variant::SearchStore => {
            store = Some(args[1]);
            3
        }
    };
    let search_cmd = matches!(v, Variant::Search | Variant::SearchStore);
    let store_ok = matches!(
        v,
        Variant::Coords { store_ok: true } | Variant::Member { store_ok: true }
    );
    let (mut withdist, mut withhash, mut withcoord, mut any) = (false, false, false, false);
    let (mut frommember, mut fromlonlat, mut byradius, mut bybox) = (false, false, false, false);
    let mut order = Order::None;
    let mut count: u64 = 0;
    let opts = &args[base..];
    let remaining = opts.len();
    let mut i = 0;
    while i < remaining {
        let has = |n: usize| i + n < remaining;
        match opts[i].to_ascii_lowercase().as_slice() {
            b"withdist" => withdist = true,
            b"withhash" => withhash = true,
            b"withcoord" => withcoord = true,
            b"any" => any = true,
            b"asc" => order = Order::Asc,
            b"desc" => order = Order::Desc,
            b"count" if has(1) => {
                let Some(c) = int_arg(opts[i + 1]) else {
                    return Ok(Err(NOT_INT.into()));
                };
                if c <= 0 {
                    return Ok(Err("ERR COUNT must be > 0".into()));
                }
                count = c as u64;
                i += 1;
            }
            b"store" if has(1) && store_ok => {
                store = Some(opts[i + 1]);
                storedist = false;
                i += 1;
            }
            b"storedist" if has(1) && store_ok => {
                store = Some(opts[i + 1]);
                storedist = true;
                i += 1;
            }
            b"storedist" if v == Variant::SearchStore => storedist = true,
            b"frommember" if has(1) && search_cmd && !fromlonlat => {
                if exists {
                    match ctx.store.zscore(src, opts[i + 1])?.and_then(decode_score) {
                        Some(p) => centre = Some(p),
                        None => return Ok(Err(NO_MEMBER.into())),
                    }
                }
                frommember = true;
                i += 1;
            }
            b"fromlonlat" if has(2) && search_cmd && !frommember => {
                match lon_lat_arg(opts[i + 1], opts[i + 2]) {
                    Ok(p) => centre = Some(p),
                    Err(e) => return Ok(Err(e)),
                }
                fromlonlat = true;
                i += 2;
            }
            b"byradius" if has(2) && search_cmd && !bybox => {
                match radius_arg(opts[i + 1], opts[i + 2]) {
                    Ok((r, u)) => shape = Some((Shape::Radius(r), u)),
                    Err(e) => return Ok(Err(e)),
                }
                byradius = true;
                i += 2;
            }
            b"bybox" if has(3) && search_cmd && !byradius => {
                match box_arg(opts[i + 1], opts[i + 2], opts[i + 3]) {
                    Ok((w, h, u)) => shape = Some((Shape::Box(w, h), u)),
                    Err(e) => return Ok(Err(e)),
                }
                bybox = true;
                i += 3;
            }
            _ => return Ok(Err(SYNTAX.into())),
        }
        i += 1;
    }
    if store.is_some() && (withdist || withhash || withcoord) {
        let what = if v == Variant::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Ok(Err(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(args[0]);
    if search_cmd && !(frommember || fromlonlat) {
        return Ok(Err(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if search_cmd && !(byradius || bybox) {
        return Ok(Err(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if any && count == 0 {
        return Ok(Err("ERR the ANY argument requires COUNT argument".into()));
    }
    let (Some((lon, lat)), Some((shape, to_meters)), true) = (centre, shape, exists) else {
        // No source: an empty result (and a store key removed).
        return Ok(Ok(match store {
            Some(dst) => {
                let existed = ctx.store.delete(dst)?;
                reply::int(ctx.out, 0);
                if existed {
                    wrote_store_key(ctx, v, dst);
                    Effect::Wrote
                } else {
                    Effect::Read
                }
            }
            None => {
                reply::array(ctx.out, 0);
                Effect::Read
            }
        }));
    };
    // COUNT without an order means the nearest ones (ANY: the first found).
    if count != 0 && order == Order::None && !any {
        order = Order::Asc;
    }
    let search = Search {
        lon,
        lat,
        shape,
        to_meters,
    };
    let mut found = members_within(ctx, src, &search, any.then_some(count))?;
    // Redis sorts with qsort (glibc's: a merge sort, stable) when every match is returned, and
    // with its pqsort, a quicksort that sorts only the part holding the first COUNT, otherwise:
    // equal distances come out in the order each leaves them.
    let by_dist = |a: &Found, b: &Found| match order {
        Order::Desc => b.dist.total_cmp(&a.dist),
        _ => a.dist.total_cmp(&b.dist),
    };
    let returned = if count != 0 {
        found
            .len()
            .min(usize::try_from(count).unwrap_or(usize::MAX))
    } else {
        found.len()
    };
    if order != Order::None {
        if returned == found.len() {
            found.sort_by(by_dist);
        } else {
            pqsort(&mut found, by_dist, 0, returned - 1);
        }
    }
    found.truncate(returned);
    for f in &mut found {
        f.dist /= to_meters;
    }
    let Some(dst) = store else {
        let extra = withdist as usize + withhash as usize + withcoord as usize;
        reply::array(ctx.out, found.len());
        for f in &found {
            if extra > 0 {
                reply::array(ctx.out, extra + 1);
            }
            reply::bulk(ctx.out, &f.member);
            if withdist {
                reply::bulk(ctx.out, fixed4(f.dist).as_bytes());
            }
            if withhash {
                reply::int(ctx.out, f.score as i64);
            }
            if withcoord {
                reply::array(ctx.out, 2);
                reply_human(ctx, f.lon);
                reply_human(ctx, f.lat);
            }
        }
        return Ok(Ok(Effect::Read));
    };
    // The destination is replaced whatever it held; an empty result deletes it.
    let existed = ctx.store.delete(dst)?;
    let pairs: Vec<(f64, &[u8])> = found
        .iter()
        .map(|f| {
            (
                if storedist { f.dist } else { f.score },
                f.member.as_slice(),
            )
        })
        .collect();
    for chunk in pairs.chunks(PAGE as usize) {
        ctx.store.zadd(dst, ZAddFlags::default(), chunk)?;
    }
    reply::int(ctx.out, found.len() as i64);
    Ok(Ok(if existed || !found.is_empty() {
        wrote_store_key(ctx, v, dst);
        Effect::Wrote
    } else {
        Effect::Read
    }))
}

/// GEORADIUS's STORE key is not among the table's key positions (it moves): its watchers and
/// blocked clients are told here. GEOSEARCHSTORE's destination is a key position.
fn wrote_store_key(ctx: &mut Ctx<'_>, v: Variant, dst: &[u8]) {
    if v != Variant::SearchStore {
        ctx.info.wrote_key(dst);
    }
}

pub(crate) fn georadius(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    search_generic(ctx, args, Variant::Coords { store_ok: true })
}
pub(crate) fn georadius_ro(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    search_generic(ctx, args, Variant::Coords { store_ok: false })
}
pub(crate) fn georadiusbymember(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    search_generic(ctx, args, Variant::Member { store_ok: true })
}
pub(crate) fn georadiusbymember_ro(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
) -> Result<Effect, StoreError> {
    search_generic(ctx, args, Variant::Member { store_ok: false })
}
pub(crate) fn geosearch(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    search_generic(ctx, args, Variant::Search)
}
pub(crate) fn geosearchstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    search_generic(ctx, args, Variant::SearchStore)
}

/// The key positions of GEORADIUS and GEORADIUSBYMEMBER (`n_fixed` arguments before their
/// options): the source, then the key after the last STORE or STOREDIST (Redis's key specs).
fn radius_keys(args: &[&[u8]], n_fixed: usize) -> Option<Vec<usize>> {
    let mut keys = vec![1];
    let mut store = None;
    let mut i = n_fixed;
    while i < args.len() {
        if (args[i].eq_ignore_ascii_case(b"STORE") || args[i].eq_ignore_ascii_case(b"STOREDIST"))
            && i + 1 < args.len()
        {
            store = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    keys.extend(store);
    Some(keys)
}

/// GEORADIUS's keys: `key`, and the STORE or STOREDIST destination.
pub(crate) fn georadius_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    radius_keys(args, 6)
}

/// GEORADIUSBYMEMBER's keys: `key`, and the STORE or STOREDIST destination.
pub(crate) fn georadiusbymember_keys(args: &[&[u8]]) -> Option<Vec<usize>> {
    radius_keys(args, 5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::Db;

    // Known values: Redis's documentation of GEOADD, GEOHASH, GEOPOS and GEODIST (Sicily).
    const PALERMO: (f64, f64) = (13.361389, 38.115556);
    const CATANIA: (f64, f64) = (15.087269, 37.502669);

    fn score(p: (f64, f64)) -> u64 {
        align52(encode_wgs84(p.0, p.1, STEP_MAX).unwrap())
    }

    #[test]
    fn encoding_gives_redis_scores_and_standard_geohashes() {
        assert_eq!(score(PALERMO), 3479099956230698);
        assert_eq!(score(CATANIA), 3479447370796909);
        assert_eq!(
            standard_geohash(score(PALERMO) as f64).unwrap(),
            "sqc8b49rny0"
        );
        assert_eq!(
            standard_geohash(score(CATANIA) as f64).unwrap(),
            "sqdtr74hyu0"
        );
        // The limits are included; beyond them there is no hash.
        assert!(encode_wgs84(180.0, LAT_MAX, STEP_MAX).is_some());
        assert!(encode_wgs84(-180.0, LAT_MIN, STEP_MAX).is_some());
        assert!(encode_wgs84(180.0001, 0.0, STEP_MAX).is_none());
        assert!(encode_wgs84(0.0, 85.06, STEP_MAX).is_none());
        assert!(encode_wgs84(f64::NAN, 0.0, STEP_MAX).is_none());
        assert!(encode_wgs84(0.0, 0.0, 0).is_none());
    }

    #[test]
    fn decoding_gives_the_centre_of_the_box() {
        let (lon, lat) = decode_score(score(PALERMO) as f64).unwrap();
        assert_eq!(human(lon), "13.36138933897018433");
        assert_eq!(human(lat), "38.11555639549629859");
        // The centre lies within a box (360/2^26 degrees of longitude) of the point.
        for (x, y) in [(0.0, 0.0), (-179.5, 84.9), (123.456, -45.678), PALERMO] {
            let (dx, dy) = decode_score(score((x, y)) as f64).unwrap();
            assert!((dx - x).abs() <= 360.0 / (1u64 << 26) as f64, "{x} {dx}");
            assert!((dy - y).abs() <= (LAT_MAX - LAT_MIN) / (1u64 << 26) as f64);
        }
        assert!(decode(HashBits::NONE).is_none());
    }

    #[test]
    fn interleaving_round_trips_and_neighbours_are_adjacent() {
        for (x, y) in [
            (0u32, 0u32),
            (1, 0),
            (0, 1),
            (u32::MAX, 0),
            (0x1234_5678, 0x9abc_def0),
        ] {
            let i = interleave64(x, y);
            assert_eq!(deinterleave64(i), (y as u64) << 32 | x as u64);
        }
        assert_eq!(interleave64(1, 0), 1);
        assert_eq!(interleave64(0, 1), 2);
        let h = encode_wgs84(PALERMO.0, PALERMO.1, 10).unwrap();
        let a = decode(h).unwrap();
        let east = decode(neighbour(h, 1, 0)).unwrap();
        let north = decode(neighbour(h, 0, 1)).unwrap();
        let south_west = decode(neighbour(h, -1, -1)).unwrap();
        assert_eq!(east.lon.0, a.lon.1);
        assert_eq!(east.lat, a.lat);
        assert_eq!(north.lat.0, a.lat.1);
        assert_eq!(north.lon, a.lon);
        assert_eq!(south_west.lat.1, a.lat.0);
        assert_eq!(south_west.lon.1, a.lon.0);
    }

    #[test]
    fn distances_and_their_printing_are_redis_s() {
        let (p, c) = (
            decode_score(score(PALERMO) as f64).unwrap(),
            decode_score(score(CATANIA) as f64).unwrap(),
        );
        let d = distance(p.0, p.1, c.0, c.1);
        assert_eq!(fixed4(d), "166274.1516");
        assert_eq!(fixed4(d / 1000.0), "166.2742");
        assert_eq!(fixed4(d / 1609.34), "103.3182");
        // Along a meridian the shortcut: the latitude difference times the radius.
        assert_eq!(distance(5.0, 0.0, 5.0, 1.0), EARTH_RADIUS_IN_METERS * D_R);
        assert_eq!(fixed4(0.0), "0.0000");
        assert_eq!(fixed4(0.00004), "0.0000");
        assert_eq!(fixed4(12.5), "12.5000");
        assert_eq!(human(2.0), "2");
        assert_eq!(human(-0.0), "0");
        assert_eq!(human(-1.25), "-1.25");
    }

    #[test]
    fn pqsort_puts_the_asked_positions_in_place() {
        let mut seed = 12345u64;
        for len in [0usize, 1, 6, 7, 8, 40, 41, 200, 1000] {
            let v: Vec<u32> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 40) as u32 % 50
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort();
            for hi in [0, 1, 5, len / 2, len.saturating_sub(1)] {
                if hi >= len {
                    continue;
                }
                let mut p = v.clone();
                pqsort(&mut p, |a, b| a.cmp(b), 0, hi);
                assert_eq!(p[..=hi], sorted[..=hi], "len {len} hi {hi}");
                let mut q = p.clone();
                q.sort();
                assert_eq!(q, sorted, "a permutation");
            }
        }
    }

    #[test]
    fn search_boxes_follow_the_radius() {
        assert_eq!(steps_by_radius(0.0, 0.0), 26);
        // 1000 m doubled 15 times passes 20037726 m: 16 steps, less Redis's margin of 2.
        assert_eq!(steps_by_radius(1000.0, 0.0), 14);
        assert_eq!(steps_by_radius(1000.0, 70.0), 13);
        assert_eq!(steps_by_radius(1000.0, -85.0), 12);
        assert_eq!(steps_by_radius(1e9, 0.0), 1);
        let s = Search {
            lon: 0.0,
            lat: 0.0,
            shape: Shape::Radius(1.0),
            to_meters: 1000.0,
        };
        let boxes = s.boxes();
        assert!(!boxes[0].is_none());
        assert!(s.contains(0.0, 0.0089).is_some());
        assert!(s.contains(0.0, 0.0091).is_none());
        let b = Search {
            shape: Shape::Box(2.0, 1.0),
            ..s
        };
        assert!(b.contains(0.0089, 0.0).is_some());
        assert!(b.contains(0.0, 0.0089).is_none());
    }

    #[test]
    fn commands_over_the_sorted_set() {
        let mut db = Db::new();
        db.replies(&[
            (
                "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
                ":2\r\n",
            ),
            ("TYPE Sicily", "+zset\r\n"),
            ("ZSCORE Sicily Palermo", "$16\r\n3479099956230698\r\n"),
            ("GEODIST Sicily Palermo Catania km", "$8\r\n166.2742\r\n"),
            (
                "GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 100 km",
                "*1\r\n$7\r\nCatania\r\n",
            ),
            (
                "GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km DESC",
                "*2\r\n$7\r\nPalermo\r\n$7\r\nCatania\r\n",
            ),
            (
                "GEOSEARCHSTORE d Sicily FROMMEMBER Palermo BYRADIUS 200 km STOREDIST",
                ":2\r\n",
            ),
            ("ZSCORE d Palermo", "$1\r\n0\r\n"),
            (
                "GEOADD Sicily 200 1 x",
                "-ERR invalid longitude,latitude pair 200.000000,1.000000\r\n",
            ),
            (
                "GEOSEARCH Sicily BYRADIUS 1 km ASC WITHDIST",
                "-ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for GEOSEARCH\r\n",
            ),
        ]);
        db.cmd("SET s v");
        assert_eq!(
            db.cmd("GEOADD s 1 1 a"),
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
        );
        // A STORE key is a write: it fails a transaction watching it and feeds a client
        // blocked on it, as any written key does.
        for (write, reply) in [
            ("GEORADIUS Sicily 15 37 200 km STORE dst", ":2\r\n"),
            (
                "GEORADIUSBYMEMBER Sicily Palermo 1 m STOREDIST dst",
                ":1\r\n",
            ),
        ] {
            let (r, exec) = db.watched_exec("dst", write);
            assert_eq!((r.as_str(), exec.as_str()), (reply, "*-1\r\n"), "{write}");
        }
        assert_eq!(
            radius_keys(
                &[b"GEORADIUS", b"k", b"1", b"1", b"1", b"km", b"STORE", b"d"],
                6
            ),
            Some(vec![1, 7])
        );
    }
}
