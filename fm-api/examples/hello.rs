//! The README's example ("Using it"), as a program of its own: each rank
//! greets the next, whose handler thanks it before reading the greeting.
//! `cargo test` checks that the README shows exactly the code below this
//! comment, and runs it alone and under fmrun.

use fm::Fm;
const HELLO: u16 = 1;
fn main() -> Result<(), fm::FmError> {
    let mut fm = Fm::builder()
        .handler(HELLO, "hello", |m| {
            m.reply(HELLO + 1, b"thanks")?; // handlers may send, before or after reading
            let text = m.receive_vec()?; // scatter: receive in pieces inside the handler
            assert_eq!(text, b"hello world");
            Ok(())
        })
        .handler(HELLO + 1, "thanks", |_| Ok(()))
        .from_env()? // FM_RANK, FM_SIZE, FM_JOB_KEY, ... (docs/CONFIG.md)
        .build()?;
    let next = (fm.rank() + 1) % fm.size() as u32;
    fm.begin_message(next, 11, HELLO)?; // gather: a message in pieces
    fm.send_piece(b"hello ")?;
    fm.send_piece(b"world")?;
    fm.end_message()?;
    while fm.stats().messages_received < 2 {
        fm.extract_wait(usize::MAX)?; // run handlers of arrived messages
    }
    println!("rank {} of {}: greeted and thanked", fm.rank(), fm.size());
    Ok(())
}
