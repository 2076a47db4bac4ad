//! Lists the offload images in a file and picks the one a device would run,
//! through the same selection `offload-probe` and the runtime use.
//!
//! ```sh
//! cargo run --example list_and_select -- /usr/lib/x86_64-linux-gnu/librocsparse.so.0 gfx90a:sramecc+:xnack-
//! ```

use offload_loader::{select, DeviceTarget, Limits, MappedFile, Policy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: list_and_select FILE [DEVICE]")?;
    let device = DeviceTarget::parse(&args.next().unwrap_or("gfx90a:sramecc+:xnack-".into()))?;

    let file = MappedFile::open(&path)?;
    for section in file.containers(&Limits::default())? {
        for container in &section.containers {
            let container = match container {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{path}: {}: {e}", section.section.name);
                    continue;
                }
            };
            println!(
                "{} {} at {:#x}, {} images",
                section.section.name,
                container.format().name(),
                container.offset(),
                container.images().len()
            );
            for image in container.images() {
                println!("  [{}] {} ({} bytes)", image.index, image.id, image.size);
            }
            // Ranks the images by what the container says, then reads the
            // chosen image's own header and takes the next best if it
            // contradicts its container's claim.
            let selection = select(&device, container, &Policy::default());
            match selection.chosen {
                Some(i) => println!("  {device} runs [{i}] {}", container.images()[i].id),
                None => println!("  {device}: no compatible image"),
            }
            for (i, why) in &selection.rejected {
                println!("    not [{i}]: {why}");
            }
        }
    }
    Ok(())
}
