//! Change-stream resume tokens: tideway's own encoding, `{_data: "<hex>"}` holding a version
//! byte, the oplog entry's `ts` (seconds and increment, big-endian) and what the token marks
//! (an event, the invalidate an entry caused, or a high-water mark with no event). Hex of
//! big-endian fields sorts as the positions do. Not interchangeable with mongod's tokens.
//!
//! Invariants: every oplog entry has a unique `ts`, so `ts` alone places a token in the oplog;
//! resuming after an event or a high-water mark at `ts` reads entries strictly after `ts`
//! (except the invalidate the same entry still owes, see `changes::stream`).

use bson::{doc, Bson, Document, Timestamp};

use tideway_base::error::{CommandError, CommandResult, ErrorCode};

const VERSION: u8 = 1;

/// What a token marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Event = 0,
    Invalidate = 1,
    HighWater = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumeToken {
    pub ts: Timestamp,
    pub mark: Mark,
}

impl ResumeToken {
    pub fn to_document(self) -> Document {
        let mut bytes = vec![VERSION];
        bytes.extend(self.ts.time.to_be_bytes());
        bytes.extend(self.ts.increment.to_be_bytes());
        bytes.push(self.mark as u8);
        let hex: String = bytes.iter().map(|byte| format!("{byte:02X}")).collect();
        doc! {"_data": hex}
    }

    /// Decodes a token a client passed back (`resumeAfter`/`startAfter`).
    pub fn parse(token: &Document) -> CommandResult<ResumeToken> {
        let invalid = |why: &str| {
            CommandError::new(
                ErrorCode::InvalidResumeToken,
                format!("Invalid resume token: {why}"),
            )
        };
        let Some(Bson::String(hex)) = token.get("_data") else {
            // mongod: resume_token.cpp (40647) for a missing or non-string `_data`.
            return Err(CommandError::new(
                ErrorCode::Location40647,
                "Bad resume token: _data of missing or of wrong type. Expected string",
            ));
        };
        if hex.len() != 20 || !hex.is_ascii() {
            return Err(invalid("not a tideway resume token"));
        }
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(|_| invalid("not hexadecimal"))?;
        if bytes[0] != VERSION {
            return Err(invalid("unknown version"));
        }
        let word = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let mark = match bytes[9] {
            0 => Mark::Event,
            1 => Mark::Invalidate,
            2 => Mark::HighWater,
            _ => return Err(invalid("unknown kind")),
        };
        Ok(ResumeToken {
            ts: Timestamp {
                time: word(1),
                increment: word(5),
            },
            mark,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_sort_as_positions() {
        let early = ResumeToken {
            ts: Timestamp {
                time: 7,
                increment: 300,
            },
            mark: Mark::Event,
        };
        let late = ResumeToken {
            ts: Timestamp {
                time: 8,
                increment: 1,
            },
            mark: Mark::Invalidate,
        };
        for token in [early, late] {
            assert_eq!(ResumeToken::parse(&token.to_document()).unwrap(), token);
        }
        let data = |token: ResumeToken| token.to_document().get_str("_data").unwrap().to_owned();
        assert!(data(early) < data(late));
        assert_eq!(
            ResumeToken::parse(&doc! {"_data": 5})
                .unwrap_err()
                .code
                .code(),
            40647
        );
        assert_eq!(
            ResumeToken::parse(&doc! {"_data": "zz"})
                .unwrap_err()
                .code
                .code(),
            260
        );
    }
}
