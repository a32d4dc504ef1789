//! OP_COMPRESSED (opcode 2012) with snappy (raw block format), zlib (RFC 1950 stream) and zstd (frame).
//! Invariant: a compressed message may not expand past [`MAX_MESSAGE_SIZE_BYTES`], and its declared
//! uncompressed size must match what decompression produced; both are checked before decoding it.

use std::io::{Read, Write};

use super::{read_i32, FramingError, MAX_MESSAGE_SIZE_BYTES, OP_COMPRESSED};

/// A compressor the server can use, with its wire id and its name in `hello.compression`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compressor {
    Snappy,
    Zlib,
    Zstd,
}

impl Compressor {
    pub const ALL: [Compressor; 3] = [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd];

    pub fn name(self) -> &'static str {
        match self {
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    pub fn from_name(name: &str) -> Option<Compressor> {
        Compressor::ALL.into_iter().find(|c| c.name() == name)
    }

    fn id(self) -> u8 {
        match self {
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }

    fn from_id(id: u8) -> Option<Compressor> {
        Compressor::ALL.into_iter().find(|c| c.id() == id)
    }
}

/// `originalOpcode | uncompressedSize | compressorId | data` → (original opcode, compressor, body).
pub(super) fn decompress(body: &[u8]) -> Result<(i32, Compressor, Vec<u8>), FramingError> {
    let malformed = |what: String| FramingError::Malformed(format!("OP_COMPRESSED {what}"));
    let (Some(op_code), Some(declared), Some(&id)) =
        (read_i32(body, 0), read_i32(body, 4), body.get(8))
    else {
        return Err(malformed("header is truncated".into()));
    };
    if op_code == OP_COMPRESSED {
        return Err(malformed("may not wrap another OP_COMPRESSED".into()));
    }
    if !(0..=MAX_MESSAGE_SIZE_BYTES).contains(&declared) {
        return Err(malformed(format!(
            "uncompressed size {declared} is out of range"
        )));
    }
    let compressor = Compressor::from_id(id)
        .ok_or_else(|| malformed(format!("compressor id {id} is not supported")))?;
    let data = &body[9..];
    let declared = declared as usize;
    let decompressed = match compressor {
        Compressor::Snappy => {
            let length = snap::raw::decompress_len(data).map_err(|e| malformed(e.to_string()))?;
            if length != declared {
                return Err(malformed(format!(
                    "snappy length {length} differs from the declared {declared}"
                )));
            }
            snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| malformed(e.to_string()))?
        }
        Compressor::Zlib => {
            read_bounded(flate2::read::ZlibDecoder::new(data), declared).map_err(malformed)?
        }
        Compressor::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::new(data).map_err(|e| malformed(e.to_string()))?;
            read_bounded(decoder, declared).map_err(malformed)?
        }
    };
    if decompressed.len() != declared {
        return Err(malformed(format!(
            "decompressed to {} bytes, not the declared {declared}",
            decompressed.len()
        )));
    }
    Ok((op_code, compressor, decompressed))
}

/// Reads at most `limit + 1` bytes, so an understated size cannot make us inflate without bound.
fn read_bounded(reader: impl Read, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(limit);
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The OP_COMPRESSED body (after the header) wrapping `payload` of opcode `op_code`; `None` if the
/// compressor failed, in which case the caller sends the payload uncompressed.
pub(super) fn compress(compressor: Compressor, op_code: i32, payload: &[u8]) -> Option<Vec<u8>> {
    let compressed = match compressor {
        Compressor::Snappy => snap::raw::Encoder::new().compress_vec(payload).ok()?,
        Compressor::Zlib => {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(payload).ok()?;
            encoder.finish().ok()?
        }
        Compressor::Zstd => zstd::bulk::compress(payload, zstd::DEFAULT_COMPRESSION_LEVEL).ok()?,
    };
    let mut out = Vec::with_capacity(9 + compressed.len());
    out.extend_from_slice(&op_code.to_le_bytes());
    out.extend_from_slice(&i32::try_from(payload.len()).ok()?.to_le_bytes());
    out.push(compressor.id());
    out.extend_from_slice(&compressed);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OP_MSG;

    #[test]
    fn every_compressor_round_trips() {
        let payload: Vec<u8> = (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for compressor in Compressor::ALL {
            let compressed = compress(compressor, OP_MSG, &payload).unwrap();
            let (op_code, used, restored) = decompress(&compressed).unwrap();
            assert_eq!((op_code, used), (OP_MSG, compressor));
            assert_eq!(restored, payload, "{compressor:?}");
        }
    }

    #[test]
    fn wrong_declared_size_is_refused() {
        for compressor in Compressor::ALL {
            let mut compressed = compress(compressor, OP_MSG, b"hello world, hello world").unwrap();
            compressed[4..8].copy_from_slice(&5i32.to_le_bytes());
            assert!(decompress(&compressed).is_err(), "{compressor:?}");
        }
    }

    #[test]
    fn unknown_compressor_and_garbage_are_refused() {
        let mut compressed = compress(Compressor::Zlib, OP_MSG, b"abc").unwrap();
        compressed[8] = 9;
        assert!(decompress(&compressed).is_err());
        assert!(decompress(&[1, 2, 3]).is_err());
        let mut garbage = compress(Compressor::Zstd, OP_MSG, b"abcdef").unwrap();
        garbage.truncate(12);
        assert!(decompress(&garbage).is_err());
    }

    #[test]
    fn names_map_both_ways() {
        for compressor in Compressor::ALL {
            assert_eq!(Compressor::from_name(compressor.name()), Some(compressor));
        }
        assert_eq!(Compressor::from_name("lz4"), None);
    }
}
