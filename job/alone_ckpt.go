package job

import "path/filepath"

// AloneCheckpointFile is the file a standalone train writes its
// checkpoints to, in --checkpoint-dir.
const AloneCheckpointFile = "alone.ckpt"

// AloneCheckpointPath is the checkpoint file of a standalone run in dir.
func AloneCheckpointPath(dir string) string { return filepath.Join(dir, AloneCheckpointFile) }
