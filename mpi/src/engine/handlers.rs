//! The FM handlers of the protocol: each matches or keeps its message and
//! queues what must be sent in answer.

use super::*;

/// An eager message (`sync`: a synchronous send's, to be acknowledged).
pub(crate) fn on_eager(shared: &Shared, m: &mut Incoming<'_>, sync: bool) -> fm::Result<()> {
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
        Some(recv_req) => sh.clear_to_send(m.src(), &env, recv_req),
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

pub(crate) fn on_data(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 4];
    if m.receive(&mut b)? < 4 {
        return Ok(());
    }
    let req = u32_at(&b, 0);
    let mut sh = lock(shared);
    let Some(r) = sh.get(req) else {
        tracing::warn!(src = m.src(), req, "mpi: data for no receive: dropped");
        return Ok(());
    };
    let env = Envelope {
        context: 0,
        source: r.status.source,
        tag: r.status.tag,
        flags: 0,
        sender_req: 0,
    };
    deliver(&mut sh, req, m, &env)
}

pub(crate) fn on_ack(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 4];
    if m.receive(&mut b)? == 4 {
        lock(shared).complete(u32_at(&b, 0), MpiStatus::proc_null());
    }
    Ok(())
}
