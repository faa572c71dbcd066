// mksif writes a SIF file with the reference SIF library (Debian's
// golang-github-sylabs-sif-dev), for berth's tests of SIF files:
//
//	mksif [-primary-fs squashfs|ext3|encrypted|none] [-overlay FILE] OUT.sif PRIMARY
//
// PRIMARY becomes the primary system partition, of the file system type
// -primary-fs says ("none": no primary partition; PRIMARY is then ignored).
// -overlay adds FILE as an ext3 overlay partition.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/sylabs/sif/pkg/sif"
)

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "mksif: "+format+"\n", a...)
	os.Exit(1)
}

func partition(path string, fs sif.FSType, pt sif.PartType) sif.DescriptorInput {
	f, err := os.Open(path)
	if err != nil {
		fail("%v", err)
	}
	di, err := sif.NewDescriptorInput(sif.DataPartition, f,
		sif.OptPartitionMetadata(fs, pt, runtime.GOARCH))
	if err != nil {
		fail("%s: %v", path, err)
	}
	return di
}

func main() {
	primaryFs := flag.String("primary-fs", "squashfs", "squashfs, ext3, encrypted or none")
	overlay := flag.String("overlay", "", "an ext3 image to add as an overlay partition")
	flag.Parse()
	if flag.NArg() != 2 {
		fail("usage: mksif [-primary-fs squashfs|ext3|encrypted|none] [-overlay FILE] OUT.sif PRIMARY")
	}
	out, primary := flag.Arg(0), flag.Arg(1)
	var parts []sif.DescriptorInput
	switch *primaryFs {
	case "squashfs":
		parts = append(parts, partition(primary, sif.FsSquash, sif.PartPrimSys))
	case "ext3":
		parts = append(parts, partition(primary, sif.FsExt3, sif.PartPrimSys))
	case "encrypted":
		parts = append(parts, partition(primary, sif.FsEncryptedSquashfs, sif.PartPrimSys))
	case "none":
	default:
		fail("unknown -primary-fs %q", *primaryFs)
	}
	if *overlay != "" {
		parts = append(parts, partition(*overlay, sif.FsExt3, sif.PartOverlay))
	}
	f, err := sif.CreateContainerAtPath(out,
		sif.OptCreateWithLaunchScript("#!/usr/bin/env run-singularity\n"),
		sif.OptCreateDeterministic(),
		sif.OptCreateWithDescriptors(parts...))
	if err != nil {
		fail("create %s: %v", out, err)
	}
	if err := f.UnloadContainer(); err != nil {
		fail("write %s: %v", out, err)
	}
}
