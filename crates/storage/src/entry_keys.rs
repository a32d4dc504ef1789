//! The stored key layouts every engine shares, so that scan positions (resume keys), the keys
//! [`crate::KeyPredicate`]s see and both expiry orders mean the same on each engine:
//! - a non-unique index entry: index key ++ encoded `_id` ++ u32 BE length of the encoded `_id`
//!   ([`index_entry_key`]); a unique index entry is the index key alone. Both sort by index key
//!   first (encoded `_id`s are prefix-free, so the suffix never reorders distinct index keys);
//! - an expiry entry: order-preserving i64 time ([`ordered_i64`]) ++ encoded `_id`;
//! - a record id (natural order position): u64 big-endian.
//!
//! Must not: change without a new storage format version in every engine (these bytes are on
//! disk and in cursors). Never panics on malformed bytes: they are `StorageError::Corrupt`.

use std::ops::Bound;

use crate::{KeyRange, StorageError, StorageResult};
use tideway_query::keycodec::prefix_successor;

/// Bytes of an order-preserving i64 ([`ordered_i64`]).
pub const TIME_LEN: usize = 8;
/// Bytes of a record id key ([`record_id_key`]).
pub const RECORD_ID_LEN: usize = 8;

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(what.to_string())
}

/// The stored key of a non-unique index entry.
pub fn index_entry_key(index_key: &[u8], id_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(index_key.len() + id_key.len() + 4);
    key.extend_from_slice(index_key);
    key.extend_from_slice(id_key);
    // Encoded ids longer than u32::MAX cannot exist (documents are at most 16 MiB).
    key.extend_from_slice(&(id_key.len() as u32).to_be_bytes());
    key
}

/// The encoded `_id` a non-unique index entry's stored key ends with.
pub fn index_entry_id(key: &[u8]) -> StorageResult<&[u8]> {
    let length_at = key
        .len()
        .checked_sub(4)
        .ok_or_else(|| corrupt("index entry shorter than its id length"))?;
    let length: [u8; 4] = key[length_at..]
        .try_into()
        .map_err(|_| corrupt("index entry id length"))?;
    let id_at = length_at
        .checked_sub(u32::from_be_bytes(length) as usize)
        .ok_or_else(|| corrupt("index entry id length out of range"))?;
    Ok(&key[id_at..length_at])
}

/// Big-endian with the sign bit flipped: byte order equals numeric order.
pub fn ordered_i64(value: i64) -> [u8; TIME_LEN] {
    ((value as u64) ^ (1 << 63)).to_be_bytes()
}

/// The i64 an [`ordered_i64`] prefix of `key` holds.
pub fn i64_of_ordered(key: &[u8]) -> StorageResult<i64> {
    let bytes: [u8; TIME_LEN] = key
        .get(..TIME_LEN)
        .and_then(|prefix| prefix.try_into().ok())
        .ok_or_else(|| corrupt("key shorter than its time prefix"))?;
    Ok((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// The stored key of an expiry entry.
pub fn expiry_key(at_ms: i64, id_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(TIME_LEN + id_key.len());
    key.extend_from_slice(&ordered_i64(at_ms));
    key.extend_from_slice(id_key);
    key
}

/// The encoded `_id` an expiry entry points to.
pub fn expiry_entry_id(key: &[u8]) -> StorageResult<&[u8]> {
    key.get(TIME_LEN..)
        .filter(|id_key| !id_key.is_empty())
        .ok_or_else(|| corrupt("expiry entry shorter than its time prefix"))
}

/// The stored form of a record id (natural order key, scan position): big-endian, so byte
/// order is numeric order.
pub fn record_id_key(record_id: u64) -> [u8; RECORD_ID_LEN] {
    record_id.to_be_bytes()
}

/// The record id of a natural order key or a scan position.
pub fn record_id_of(key: &[u8]) -> StorageResult<u64> {
    let bytes: [u8; RECORD_ID_LEN] = key
        .try_into()
        .map_err(|_| corrupt("record id of the wrong length"))?;
    Ok(u64::from_be_bytes(bytes))
}

/// A contract range as a range over stored keys: lower bound Included or Unbounded, upper bound
/// Excluded or Unbounded; `None` if it is empty.
pub fn stored_range((lower, upper): KeyRange) -> Option<KeyRange> {
    let lower = match lower {
        Bound::Included(key) => Bound::Included(key),
        Bound::Excluded(key) => Bound::Included(prefix_successor(&key)?),
        Bound::Unbounded => Bound::Unbounded,
    };
    let upper = match upper {
        Bound::Included(key) => prefix_successor(&key).map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Excluded(key) => Bound::Excluded(key),
        Bound::Unbounded => Bound::Unbounded,
    };
    Some((lower, upper))
}

/// `range` narrowed to the keys strictly after (before, in reverse) `resume`.
pub fn after_resume(range: &KeyRange, resume: Option<&[u8]>, reverse: bool) -> KeyRange {
    let (lower, upper) = range.clone();
    let Some(resume) = resume else {
        return (lower, upper);
    };
    if reverse {
        let upper = match upper {
            Bound::Excluded(key) if key.as_slice() <= resume => Bound::Excluded(key),
            _ => Bound::Excluded(resume.to_vec()),
        };
        (lower, upper)
    } else {
        let lower = match lower {
            Bound::Included(key) if key.as_slice() > resume => Bound::Included(key),
            _ => Bound::Excluded(resume.to_vec()),
        };
        (lower, upper)
    }
}

pub fn is_empty((lower, upper): &KeyRange) -> bool {
    match (lower, upper) {
        (Bound::Included(low), Bound::Excluded(high)) => low >= high,
        (Bound::Excluded(low), Bound::Excluded(high)) => low >= high,
        _ => false,
    }
}

/// An i64 time range as a stored-key range over expiry keys (time prefix ++ `_id`); `None` if
/// empty.
pub fn expiry_range((lower, upper): (Bound<i64>, Bound<i64>)) -> Option<KeyRange> {
    let time = |at: i64| ordered_i64(at).to_vec();
    let lower = match lower {
        Bound::Included(at) => Bound::Included(time(at)),
        Bound::Excluded(at) => Bound::Included(time(at.checked_add(1)?)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let upper = match upper {
        Bound::Included(at) => at
            .checked_add(1)
            .map_or(Bound::Unbounded, |next| Bound::Excluded(time(next))),
        Bound::Excluded(at) => Bound::Excluded(time(at)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let range = (lower, upper);
    (!is_empty(&range)).then_some(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_times_round_trip_and_sort() {
        let times = [i64::MIN, -1_000, -1, 0, 1, 1_700_000_000_000, i64::MAX];
        for pair in times.windows(2) {
            assert!(ordered_i64(pair[0]) < ordered_i64(pair[1]));
        }
        for time in times {
            let key = expiry_key(time, &[0x10, 5]);
            assert_eq!(i64_of_ordered(&key).unwrap(), time);
            assert_eq!(expiry_entry_id(&key).unwrap(), &[0x10, 5]);
        }
        assert!(i64_of_ordered(&[1, 2]).is_err());
        assert!(expiry_entry_id(&ordered_i64(3)).is_err());
    }

    #[test]
    fn index_entries_end_with_their_id() {
        let key = index_entry_key(b"\x30abc\x00", &[0x27, 1, 2]);
        assert_eq!(index_entry_id(&key).unwrap(), &[0x27, 1, 2]);
        assert!(index_entry_id(&[0, 0, 0, 9]).is_err());
        assert!(index_entry_id(&[1]).is_err());
        assert_eq!(record_id_of(&record_id_key(77)).unwrap(), 77);
        assert!(record_id_of(&[1, 2]).is_err());
    }

    fn range(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> KeyRange {
        (lower.map(<[u8]>::to_vec), upper.map(<[u8]>::to_vec))
    }

    #[test]
    fn contract_ranges_become_prefix_ranges() {
        assert_eq!(
            stored_range(range(Bound::Excluded(b"ab"), Bound::Included(b"ax"))),
            Some(range(Bound::Included(b"ac"), Bound::Excluded(b"ay")))
        );
        assert_eq!(
            stored_range(range(Bound::Excluded(b"\xff"), Bound::Unbounded)),
            None
        );
        assert_eq!(
            stored_range(range(Bound::Unbounded, Bound::Included(b"\xff"))),
            Some(range(Bound::Unbounded, Bound::Unbounded))
        );
    }

    #[test]
    fn time_ranges_become_expiry_key_ranges() {
        let time = |at: i64| ordered_i64(at).to_vec();
        assert_eq!(
            expiry_range((Bound::Excluded(4), Bound::Included(9))),
            Some((Bound::Included(time(5)), Bound::Excluded(time(10))))
        );
        assert_eq!(
            expiry_range((Bound::Included(-3), Bound::Excluded(0))),
            Some((Bound::Included(time(-3)), Bound::Excluded(time(0))))
        );
        assert_eq!(
            expiry_range((Bound::Unbounded, Bound::Included(i64::MAX))),
            Some((Bound::Unbounded, Bound::Unbounded))
        );
        assert_eq!(
            expiry_range((Bound::Excluded(i64::MAX), Bound::Unbounded)),
            None
        );
        assert_eq!(expiry_range((Bound::Included(5), Bound::Excluded(5))), None);
        assert_eq!(expiry_range((Bound::Included(6), Bound::Included(5))), None);
    }

    #[test]
    fn resume_narrows_ranges() {
        let full = range(Bound::Included(b"b"), Bound::Excluded(b"y"));
        assert_eq!(
            after_resume(&full, Some(b"c"), false),
            range(Bound::Excluded(b"c"), Bound::Excluded(b"y"))
        );
        assert_eq!(after_resume(&full, Some(b"a"), false), full);
        assert_eq!(
            after_resume(&full, Some(b"c"), true),
            range(Bound::Included(b"b"), Bound::Excluded(b"c"))
        );
        assert!(is_empty(&after_resume(&full, Some(b"z"), false)));
        assert!(is_empty(&after_resume(&full, Some(b"a"), true)));
    }
}
