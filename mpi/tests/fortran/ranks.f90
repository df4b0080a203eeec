! A Fortran MPI program built with MPICH's mpif90 (its Fortran library,
! libmpichfort.so.12, over fm's libmpich.so.12): point-to-point with a
! status and with MPI_STATUS_IGNORE, a communicator split in reversed
! order, a derived type (every other element of an array), a broadcast and
! an allreduce on the split. Each rank prints what it got, one line each;
! the output is the same under fmrun and under mpiexec.mpich. Needs an
! even number of ranks, at least 2.
program ranks
  use mpi
  implicit none
  integer :: ierr, rank, nranks, sub, subrank, subsize, every_other, i, total, peer
  integer :: status(MPI_STATUS_SIZE)
  double precision :: a(10), b(5)
  character(len=8) :: word

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  ! Even and odd ranks apart, each half in reversed order.
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), -rank, sub, ierr)
  call MPI_Comm_rank(sub, subrank, ierr)
  call MPI_Comm_size(sub, subsize, ierr)

  ! Rank r sends every other element of its array to its partner r xor 1.
  call MPI_Type_vector(5, 1, 2, MPI_DOUBLE_PRECISION, every_other, ierr)
  call MPI_Type_commit(every_other, ierr)
  do i = 1, 10
     a(i) = rank * 100 + i
  end do
  b = -1
  peer = ieor(rank, 1)
  if (mod(rank, 2) == 0) then
     call MPI_Send(a, 1, every_other, peer, 7, MPI_COMM_WORLD, ierr)
     call MPI_Recv(b, 5, MPI_DOUBLE_PRECISION, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  else
     call MPI_Recv(b, 5, MPI_DOUBLE_PRECISION, peer, 7, MPI_COMM_WORLD, status, ierr)
     call MPI_Send(a, 1, every_other, peer, 8, MPI_COMM_WORLD, ierr)
     print '(A,I3,A,I3,A,I3)', 'rank', rank, ': status source', status(MPI_SOURCE), ' tag', status(MPI_TAG)
  end if
  print '(A,I3,A,5F7.0)', 'rank', rank, ': got', b

  ! The split's first member (the half's highest world rank) broadcasts.
  word = 'none'
  if (subrank == 0) write (word, '(A,I3)') 'from', rank
  call MPI_Bcast(word, 8, MPI_CHARACTER, 0, sub, ierr)
  call MPI_Allreduce(rank, total, 1, MPI_INTEGER, MPI_SUM, sub, ierr)
  print '(A,I3,A,I3,A,I3,A,A,A,I4)', 'rank', rank, ': sub rank', subrank, ' of', subsize, &
       ' bcast "', word, '" sum', total

  call MPI_Type_free(every_other, ierr)
  call MPI_Comm_free(sub, ierr)
  call MPI_Finalize(ierr)
end program ranks
