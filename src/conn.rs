//! One client connection: read a frame, decode it, dispatch the command, write the reply, repeat.
//! Requests on a connection are answered in order, one at a time. The connection is listed in the
//! op registry while it is open (`$currentOp` reports idle connections from it).
//!
//! Invariants: a header with an impossible length closes the connection before its body is read; a
//! malformed body is answered with an error and the connection goes on; a `moreToCome` request is
//! never answered. On shutdown an idle connection closes at once and a busy one finishes the request
//! in hand first.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use crate::client::ClientInfo;
use crate::dispatch::dispatch;
use crate::state::{bump, ServerState};
use tideway_wire::{self as wire, MessageHeader, HEADER_LEN};

/// Replies to these commands go out uncompressed, whatever the request used (OP_COMPRESSED spec).
const NEVER_COMPRESSED: &[&str] = &[
    "hello",
    "isMaster",
    "ismaster",
    "saslStart",
    "saslContinue",
    "getnonce",
    "authenticate",
    "createUser",
    "updateUser",
    "copydbSaslStart",
    "copydbgetnonce",
    "copydb",
];

/// Bodies are read in pieces of at most this size, so a header announcing a large message costs
/// memory only as its bytes actually arrive.
const READ_CHUNK: usize = 1 << 20;

pub(crate) async fn serve_connection<S>(
    state: Arc<ServerState>,
    stream: S,
    client: Arc<ClientInfo>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Listed by `$currentOp` with `idleConnections` while it is open.
    let _registered = state.ops.connection_opened(&client);
    let (reader, mut writer) = tokio::io::split(stream);
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut next_reply_id: i32 = 1;
    let mut first_message = true;
    loop {
        let header = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stopping| *stopping) => break,
            header = read_header(&mut reader) => header,
        };
        let header = match header {
            Ok(Some(header)) => header,
            Ok(None) => break,
            Err(error) => {
                tracing::debug!(%error, "read failed");
                break;
            }
        };
        if std::mem::take(&mut first_message) && !client.tls && header.is_tls_client_hello() {
            // mongod's words; its 33 MB "length" would otherwise keep the client waiting.
            tracing::warn!(remote = %client.remote, "closing connection: SSL handshake received but server is started without SSL support");
            break;
        }
        let body_length = match header.check_length() {
            Ok(length) => length,
            Err(error) => {
                tracing::warn!(%error, remote = %client.remote, "closing connection: bad message header");
                break;
            }
        };
        let body = match read_body(&mut reader, body_length).await {
            Ok(body) => body,
            Err(error) => {
                tracing::debug!(%error, "connection closed mid-message");
                break;
            }
        };
        bump(&state.stats.bytes_in, (HEADER_LEN + body_length) as u64);
        bump(&state.stats.requests, 1);
        let request = match wire::decode_request(&header, &body) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, remote = %client.remote, "closing connection: undecodable message");
                break;
            }
        };
        drop(body);
        if let (Some(compressor), Some((wire_bytes, plain_bytes))) =
            (request.compressor, request.compressed_sizes)
        {
            let counters = state.stats.compression(compressor);
            bump(&counters.decompressor_bytes_in, wire_bytes as u64);
            bump(&counters.decompressor_bytes_out, plain_bytes as u64);
        }
        let (reply, command_name) = match &request.command {
            Ok(command) => {
                let name = command.keys().next().cloned().unwrap_or_default();
                (dispatch(&state, &client, command).await, name)
            }
            Err(error) => (error.to_reply().into(), String::new()),
        };
        if request.more_to_come {
            continue;
        }
        let compressible = !NEVER_COMPRESSED.contains(&command_name.as_str());
        let encoded = wire::encode_reply(&request, next_reply_id, &reply, compressible);
        next_reply_id = next_reply_id.wrapping_add(1);
        if let Some((compressor, plain_bytes, wire_bytes)) = encoded.compression {
            let counters = state.stats.compression(compressor);
            bump(&counters.compressor_bytes_in, plain_bytes as u64);
            bump(&counters.compressor_bytes_out, wire_bytes as u64);
        }
        if let Err(error) = writer.write_all(&encoded.bytes).await {
            tracing::debug!(%error, "write failed");
            break;
        }
        bump(&state.stats.bytes_out, encoded.bytes.len() as u64);
    }
    let _ = writer.shutdown().await;
}

/// The next header, or `None` on a clean end of stream between messages.
async fn read_header<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Option<MessageHeader>> {
    let mut bytes = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        let read = reader.read(&mut bytes[filled..]).await?;
        if read == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        filled += read;
    }
    Ok(Some(MessageHeader::parse(&bytes)))
}

async fn read_body<R: AsyncRead + Unpin>(reader: &mut R, length: usize) -> io::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(length.min(READ_CHUNK));
    let read = reader.take(length as u64).read_to_end(&mut body).await?;
    if read < length {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(body)
}
