//! The FM handlers of the protocol: each matches or keeps its message and
//! queues what must be sent in answer.

use super::*;

/// An eager message (`sync`: a synchronous send's, to be acknowledged).
pub(crate) fn on_eager(shared: &Shared, m: &mut Incoming<'_>, sync: bool) -> fm::Result<()> {
    // A message of one packet is matched and copied where it lies.
    let from = m.src();
    if let Some(()) = m.receive_in_place(|b| on_eager_in_place(shared, from, b, sync)) {
        return Ok(());
    }
    let mut head = [0u8; SYNC_ENVELOPE];
    let (head, flags) = if sync {
        (&mut head[..], SYNC)
    } else {
        (&mut head[..ENVELOPE], 0)
    };
    if m.receive(head)? < head.len() {
        tracing::warn!(
            src = m.src(),
            "mpi: a message shorter than its envelope: dropped"
        );
        return Ok(());
    }
    let env = Envelope::read(head, flags);
    let mut sh = lock(shared);
    match sh.take_posted(&env) {
        Some(req) => deliver(&mut sh, req, m, &env)?,
        None => {
            let data = m.receive_vec()?;
            sh.keep_unexpected(Unexpected {
                env,
                from: m.src(),
                body: Body::Eager(data),
            });
            return Ok(());
        }
    }
    if env.flags & SYNC != 0 {
        sh.actions.push(Action::Ack {
            to: m.src(),
            sender_req: env.sender_req,
        });
    }
    Ok(())
}

/// [`on_eager`] of a message whose bytes `b` all lie in one packet.
fn on_eager_in_place(shared: &Shared, from: Rank, b: &[u8], sync: bool) {
    let (head_len, flags) = if sync {
        (SYNC_ENVELOPE, SYNC)
    } else {
        (ENVELOPE, 0)
    };
    let Some((head, data)) = b.split_at_checked(head_len) else {
        tracing::warn!(
            src = from,
            "mpi: a message shorter than its envelope: dropped"
        );
        return;
    };
    let env = Envelope::read(head, flags);
    let mut sh = lock(shared);
    match sh.take_posted(&env) {
        Some(req) => sh.deliver_eager(req, data, &env, from),
        None => sh.keep_unexpected(Unexpected {
            env,
            from,
            body: Body::Eager(data.to_vec()),
        }),
    }
}

pub(crate) fn on_rts(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut head = [0u8; RTS_LEN];
    if m.receive(&mut head)? < RTS_LEN {
        tracing::warn!(src = m.src(), "mpi: a short request to send: dropped");
        return Ok(());
    }
    let env = Envelope::read(&head[..SYNC_ENVELOPE], 0);
    let len = u64::from_le_bytes(head[SYNC_ENVELOPE..].try_into().unwrap_or([0; 8]));
    let mut sh = lock(shared);
    match sh.take_posted(&env) {
        Some(recv_req) => sh.clear_to_send(m.src(), &env, recv_req, len),
        None => sh.keep_unexpected(Unexpected {
            env,
            from: m.src(),
            body: Body::Rendezvous { len },
        }),
    }
    Ok(())
}

pub(crate) fn on_cts(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 8];
    if m.receive(&mut b)? < 8 {
        return Ok(());
    }
    lock(shared).actions.push(Action::Data {
        req: u32_at(&b, 0),
        to: m.src(),
        recv_req: u32_at(&b, 4),
    });
    Ok(())
}

/// A piece of a cleared rendezvous message (`stream.rs`): its bytes go
/// into the receive's buffer at the piece's offset, as far as the buffer
/// reaches, and the last piece completes the receive (truncated if the
/// message was longer than the buffer). A piece that does not continue
/// its message where the last one ended, or that goes past its end, is
/// dropped and counted as a warning.
pub(crate) fn on_data(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; DATA_HEAD];
    if m.receive(&mut b)? < DATA_HEAD {
        tracing::warn!(src = m.src(), "mpi: a short piece of data: dropped");
        return Ok(());
    }
    let req = u32_at(&b, 0);
    let offset = u64::from_le_bytes(b[4..].try_into().unwrap_or([0; 8]));
    let n = m.remaining();
    let mut sh = lock(shared);
    let piece = match sh.get(req) {
        Some(Request {
            op: Op::Recv { buf, cap },
            arriving: Some(a),
            done: false,
            ..
        }) if offset == a.at as u64 && n <= a.len - a.at => Some((*buf, *cap, *a)),
        _ => None,
    };
    let Some((buf, cap, a)) = piece else {
        tracing::warn!(
            src = m.src(),
            req,
            offset,
            "mpi: data for no receive, or out of its message's order: dropped"
        );
        return Ok(());
    };
    let fits = n.min(cap.saturating_sub(a.at));
    if fits > 0 {
        // SAFETY: the receive's buffer holds `cap` bytes and lives until
        // the request completes (MPI's rule for the caller); a.at + fits
        // ≤ cap.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.add(a.at), fits) };
        m.receive(dst)?;
    }
    let at = a.at + n;
    let Some(r) = sh.get(req) else {
        return Ok(());
    };
    r.arriving = Some(Arriving { len: a.len, at });
    if at == a.len {
        let (source, tag) = (r.status.source, r.status.tag);
        let error = match a.len > cap {
            true => MPI_ERR_TRUNCATE,
            false => MPI_SUCCESS,
        };
        sh.complete(req, MpiStatus::new(source, tag, a.len.min(cap), error));
    }
    Ok(())
}

pub(crate) fn on_ack(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 4];
    if m.receive(&mut b)? == 4 {
        lock(shared).complete(u32_at(&b, 0), MpiStatus::proc_null());
    }
    Ok(())
}
