/* wall-clock harness, OMP threads: kernel vs parallel memcpy alternating; median of 15 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include KFILE
static double now(void){struct timespec t;clock_gettime(omp_get_max_threads()==1?CLOCK_THREAD_CPUTIME_ID:CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static void pcopy(float*d,const float*s,long n){
  #pragma omp parallel
  { int t=omp_get_thread_num(),T=omp_get_num_threads(); long a=n*t/T,b=n*(t+1)/T; memcpy(d+a,s+a,(b-a)*4);} }
int main(int argc,char**argv){
  long R=4096,C=4096,n=R*C; int nb=NBUF;
  void *bufs[8]; float *x=aligned_alloc(64,n*4),*y=aligned_alloc(64,n*4),*o=aligned_alloc(64,n*4),*d=aligned_alloc(64,n*4);
  srand(1); for(long i=0;i<n;i++){x[i]=(rand()/(float)RAND_MAX-0.5f)*6; y[i]=(rand()/(float)RAND_MAX-0.5f)*6;}
  float *t1=aligned_alloc(64,R*4*2),*t2=aligned_alloc(64,R*4*2);
  memset(o,0,n*4);memset(d,0,n*4);
  if(nb==4){bufs[0]=x;bufs[1]=o;bufs[2]=t1;bufs[3]=t2;} else {bufs[0]=x;bufs[1]=y;bufs[2]=o;}
  double ks[15],cs[15];
  for(int r=0;r<15;r++){double t0=now();for(int k=0;k<5;k++)pcopy(d,x,n);cs[r]=(now()-t0)/5;
    t0=now();for(int k=0;k<5;k++)ENTRY(bufs);ks[r]=(now()-t0)/5;}
  qsort(ks,15,8,cmp);qsort(cs,15,8,cmp);
  double kbytes = (nb==4?2.0:3.0)*n*4;
  printf("%-14s T=%d kernel %.2f ms copy %.2f ms  pct %.1f%%\n",KFILE,omp_get_max_threads(),ks[7]*1e3,cs[7]*1e3,100*(kbytes/ks[7])/(2.0*n*4/cs[7]));
  if(argc>1){FILE*f=fopen(argv[1],"wb");fwrite(o,4,n,f);fclose(f);}
  return 0;}
