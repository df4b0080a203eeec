//! A real FM job on this host: N processes pass a token round a ring, each
//! rank's handler forwarding it from inside the handler, then every rank
//! sends a 1 MiB message to its neighbour — gathered from two pieces,
//! streamed through shared-memory frames, read by the handler in 64 KiB
//! pieces as it arrives — and checks every byte.
//!
//! Start it with fmrun, which starts the resource manager and the ranks:
//!
//!     cargo build --release --workspace --lib --bins --examples
//!     target/release/fmrun -n 4 --show-table target/release/examples/ring
//!
//! Started by hand it is a job of one rank that passes the token to itself.

use fm::{Fm, Incoming};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const TOKEN: u16 = 1;
const BULK: u16 = 2;
const ROUNDS: u64 = 3;
const BULK_LEN: usize = 1 << 20;

fn main() -> ExitCode {
    fm::init_logging();
    match rank_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ring: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pattern(src: u32, i: usize) -> u8 {
    (i as u32).wrapping_mul(31).wrapping_add(src) as u8
}

fn rank_main() -> fm::Result<()> {
    // Handlers are `Send` (an `Fm` may move between threads): their state
    // is shared through `Arc` and atomics.
    let hops = Arc::new(AtomicU64::new(0));
    let bulk_ok = Arc::new(AtomicBool::new(false));
    let (h, b) = (hops.clone(), bulk_ok.clone());
    let mut fm = Fm::builder()
        .handler(TOKEN, "token", move |m: &mut Incoming<'_>| {
            let mut v = [0u8; 8];
            m.receive(&mut v)?;
            let hop = u64::from_le_bytes(v);
            h.fetch_add(1, Relaxed);
            let ep = m.endpoint();
            let (me, size) = (ep.rank(), ep.size() as u64);
            println!("rank {me}: token hop {hop} from rank {}", m.src());
            if hop + 1 < ROUNDS * size {
                let next = (me + 1) % size as u32;
                m.endpoint().send(next, TOKEN, &(hop + 1).to_le_bytes())?;
            }
            Ok(())
        })
        .handler(BULK, "bulk", move |m: &mut Incoming<'_>| {
            // Scatter: read the message in 64 KiB pieces as it streams in.
            let src = m.src();
            let mut buf = vec![0u8; 64 * 1024];
            let (mut off, mut good) = (0usize, m.len() == BULK_LEN);
            while m.remaining() > 0 {
                let n = m.receive(&mut buf)?;
                good &= buf[..n]
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == pattern(src, off + i));
                off += n;
            }
            b.store(good, Relaxed);
            Ok(())
        })
        .from_env()?
        .build()?;
    let (me, size) = (fm.rank(), fm.size() as u32);
    if me == 0 {
        fm.send(1 % size, TOKEN, &0u64.to_le_bytes())?;
    }
    while hops.load(Relaxed) < ROUNDS {
        fm.extract_wait(usize::MAX)?;
    }
    // Gather: the bulk message goes out in two pieces.
    let data: Vec<u8> = (0..BULK_LEN).map(|i| pattern(me, i)).collect();
    let next = (me + 1) % size;
    fm.begin_message(next, BULK_LEN, BULK)?;
    fm.send_piece(&data[..1000])?;
    fm.send_piece(&data[1000..])?;
    fm.end_message()?;
    while !bulk_ok.load(Relaxed) {
        fm.extract_wait(usize::MAX)?;
    }
    fm.barrier()?;
    let st = fm.stats();
    println!(
        "rank {me}: 1 MiB from rank {} checked; {} messages sent, {} received, {} credit stalls",
        (me + size - 1) % size,
        st.messages_sent,
        st.messages_received,
        st.credit_stalls
    );
    Ok(())
}
